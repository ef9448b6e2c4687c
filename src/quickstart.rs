//! `rdml quickstart`: the small CNN trained with the triplet loss on Fashion-MNIST (the full set
//! when installed, else the test split shipped inside rdml), evaluated, then attacked with the
//! nearest-neighbour attack at robrank's rob28 budget on 512 test queries; `report.json` holds it.

use crate::attack::budget::Pgd;
use crate::attack::suite::AttackResult;
use crate::attack::{registry, unit::Attack};
use crate::config::Experiment;
use crate::eval::Metrics;
use crate::run_dir::{Found, inspect};
use crate::scoring::options::{Resolved, RunScoring, ScoringOptions};
use crate::train::{RunReport, TrainOptions, train};
use anyhow::{Context as _, Result, bail};
use burn::tensor::Device;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where Debian's `dataset-fashion-mnist` installs the full set.
pub const FULL_SET: &str = "/usr/share/datasets/fashion-mnist";
/// The attack quickstart runs, its budget profile and its number of queries.
pub const ATTACK: &str = "NN";
pub const PROFILE: &str = "rob28";
pub const QUERIES: usize = 512;

/// A resolved quickstart: its config, run folder and a description of its data.
pub struct Quickstart {
    pub exp: Experiment,
    pub out: PathBuf,
    pub source: String,
    pub overwrite: bool,
}

impl Quickstart {
    /// Resolves the run folder (`runs/quickstart`, or the first free `runs/quickstart-N` when it
    /// holds a run and neither `out` nor `overwrite` is given) and the data.
    pub fn new(out: Option<PathBuf>, overwrite: bool, data: Option<PathBuf>, epochs: Option<usize>) -> Result<Self> {
        let out = match out {
            Some(o) => o,
            None if overwrite => PathBuf::from("runs/quickstart"),
            None => free_run_folder("runs/quickstart")?,
        };
        let full = data.or_else(|| {
            let d = PathBuf::from(FULL_SET);
            crate::data::mnist::full_set_present(&d).then_some(d)
        });
        let mut set: Vec<String> = epochs.map(|e| format!("train.epochs={e}")).into_iter().collect();
        let source = match &full {
            Some(d) => {
                set.push("data.dataset=\"fashion-mnist\"".into());
                set.push(format!("data.root={:?}", d.display().to_string()));
                // 469 batches per epoch: one epoch of 200 batches stays within a few minutes on
                // two CPU cores (see README).
                if epochs.is_none() {
                    set.push("train.epochs=1".into());
                    set.push("train.max_batches=200".into());
                }
                format!("Fashion-MNIST from {} (60,000 train / 10,000 test)", d.display())
            }
            None => "the Fashion-MNIST test split shipped in rdml (8,000 train / 2,000 test)".into(),
        };
        Ok(Self {
            exp: Experiment::load("quickstart", &set)?,
            out,
            source,
            overwrite,
        })
    }

    /// One line saying what will be trained.
    pub fn describe(&self) -> String {
        format!(
            "rdml quickstart: C2F2 + triplet loss on {}, {} epoch(s){}",
            self.source,
            self.exp.train.epochs,
            self.exp
                .train
                .max_batches
                .map(|m| format!(" of {m} batches"))
                .unwrap_or_default()
        )
    }

    /// Trains the model (with progress) and returns its run report with final metrics.
    pub fn train(&self, device: &Device, progress: bool) -> Result<(RunReport, Metrics)> {
        let rep = train(
            &self.exp,
            &TrainOptions {
                out: self.out.clone(),
                resume: false,
                overwrite: self.overwrite,
                progress,
            },
            device,
        )?;
        let m = rep.final_metrics.clone().context("no final evaluation")?;
        Ok((rep, m))
    }

    /// The quickstart's attack and its options: [`ATTACK`] at the [`PROFILE`] budget on the
    /// first [`QUERIES`] test items, seeded by the experiment.
    pub fn attack_options(&self) -> Result<(Box<dyn Attack>, Resolved)> {
        let (unit, spec) = registry::attack_with_budget(ATTACK)?;
        let options = ScoringOptions {
            profile: PROFILE.parse()?,
            queries: QUERIES,
            seed: self.exp.seed,
            ..Default::default()
        };
        Ok((unit, options.resolve(spec, 1)?))
    }

    /// Attacks the trained model and writes `report.json` (the result and its budget returned); `started` is when quickstart began.
    pub fn attack(
        &self,
        rep: &RunReport,
        metrics: &Metrics,
        device: &Device,
        started: Instant,
    ) -> Result<(AttackResult, Pgd)> {
        let (unit, options) = self.attack_options()?;
        let run = RunScoring {
            progress: false,
            ..Default::default()
        };
        let nn =
            crate::scoring::open_run(&self.out, &run, &options, device)?.attack_once(unit.as_ref(), false, None)?;
        let pgd = options.pgd;
        let report = serde_json::json!({
            "data": self.source,
            "config": self.exp,
            "metrics": metrics,
            "train_seconds": rep.train_seconds,
            "run_dir": self.out,
            "attack": {
                "attack": "NN (Algorithm 1)", "profile": PROFILE, "pgd": pgd, "queries": nn.queries,
                "recall@1:clean": nn.score("recall@1:clean"), "recall@1:attacked": nn.score("recall@1"),
                "seconds": nn.seconds,
            },
            "total_seconds": started.elapsed().as_secs_f64(),
        });
        crate::run_dir::put_json(&self.out, "report.json", &report)?;
        Ok((nn, pgd))
    }

    pub fn report_path(&self) -> PathBuf {
        self.out.join("report.json")
    }
}

/// `base` if it holds no run, else the first `base-N` that holds none.
pub fn free_run_folder(base: &str) -> Result<PathBuf> {
    for n in 1..1000 {
        let p = if n == 1 {
            PathBuf::from(base)
        } else {
            PathBuf::from(format!("{base}-{n}"))
        };
        if inspect(Path::new(&p))? == Found::Nothing {
            if n > 1 {
                crate::notes::note(format!("{base} holds a run (kept): writing to {}", p.display()));
            }
            return Ok(p);
        }
    }
    bail!("{base}-2 … {base}-999 all hold runs: pass ⟨out⟩, or ⟨overwrite!⟩ to replace {base}")
}
