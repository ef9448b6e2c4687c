//! Side-by-side comparison of experiments: each config is trained (or its finished run loaded, or
//! an interrupted one resumed) under `DIR/<name>`, its test metrics taken from the run, the
//! robustness suite run on it, and one table written — clean R@1, MAP@R, NMI, ERS, ARS and
//! training time per experiment.

use crate::attack::engine::Pgd;
use crate::attack::suite::{Context, Setup, robustness};
use crate::config::Experiment;
use crate::eval::health::Verdict;
use crate::report::write_atomic;
use crate::run_dir::{Found, config_diff, inspect};
use crate::train::{RunReport, TrainOptions, load_run, train};
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One row of the comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub name: String,
    pub defense: String,
    pub loss: String,
    #[serde(rename = "recall@1", alias = "recall_at_1")]
    pub recall_at_1: f64,
    #[serde(rename = "map@r", alias = "map_at_r")]
    pub map_at_r: f64,
    pub nmi: Option<f64>,
    pub ers: f64,
    pub ars: f64,
    pub train_seconds: f64,
    pub epochs: usize,
    pub run: PathBuf,
    /// The health verdict of the run's final evaluation.
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// What the suite runs with.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub out: PathBuf,
    pub pgd: Pgd,
    pub queries: usize,
    pub batch: usize,
    pub seed: u64,
    /// How the suite's images are made (a [`crate::attack::registry::method`] spec).
    pub method: String,
    pub progress: bool,
    /// Train every experiment again, replacing finished runs in `out`.
    pub overwrite: bool,
}

fn finished(dir: &Path) -> Option<RunReport> {
    let r: RunReport = serde_json::from_slice(&std::fs::read(dir.join("run.json")).ok()?).ok()?;
    r.completed.then_some(r)
}

/// Trains (or loads) and scores every experiment; writes `compare.json` and `compare.md`.
/// A finished run is reused only when its resolved config equals the requested one; an
/// interrupted one is resumed (with the same config, see [`train`]).
pub fn compare(exps: &[Experiment], opts: &CompareOptions, device: &Device) -> Result<Vec<Row>> {
    let method = crate::attack::registry::method(&opts.method)?;
    std::fs::create_dir_all(&opts.out).with_context(|| format!("cannot create {}", opts.out.display()))?;
    let mut names = std::collections::HashSet::new();
    for exp in exps {
        anyhow::ensure!(
            names.insert(exp.name.clone()),
            "two configs are named '{}': names must differ (they name the run folders)",
            exp.name
        );
    }
    let mut rows = vec![];
    for exp in exps {
        let dir = opts.out.join(&exp.name);
        let wanted = exp.to_toml()?;
        let reuse = match finished(&dir) {
            Some(r) if !opts.overwrite => {
                let saved = std::fs::read_to_string(dir.join("config.toml")).unwrap_or_default();
                let diff = config_diff(&saved, &wanted);
                anyhow::ensure!(
                    diff.is_empty(),
                    "{} holds a finished run of '{}' with a different configuration (differs at {}): compare reuses a run only when its config equals the requested one; pass --overwrite to train it again, or choose another --out",
                    dir.display(),
                    exp.name,
                    diff.join(", ")
                );
                Some(r)
            }
            _ => None,
        };
        let report = match reuse {
            Some(r) => r,
            None => {
                let resumable = matches!(inspect(&dir)?, Found::Resumable { .. });
                train(
                    exp,
                    &TrainOptions {
                        out: dir.clone(),
                        resume: resumable && !opts.overwrite,
                        overwrite: opts.overwrite,
                        progress: opts.progress,
                    },
                    device,
                )?
            }
        };
        let m = report
            .final_metrics
            .clone()
            .with_context(|| format!("{}: the run has no final metrics", dir.display()))?;
        let run = load_run(&dir, None, device)?;
        let ctx = Context::new(&run.net, &run.test.query, device, false)?.with_distance(run.exp.loss.distance());
        let setup = Setup {
            method: method.as_ref(),
            progress: opts.progress,
            ..Setup::white_box(&ctx, &opts.pgd, opts.queries, opts.batch, opts.seed)
        };
        let r = robustness(&setup)?;
        // The run's own copy, as `rdml robustness` writes it: its report shows the terms.
        crate::report::write_json(
            &dir.join(crate::html::ROBUSTNESS_FILE),
            &serde_json::json!({"model": dir, "method": opts.method, "pgd": opts.pgd, "queries": opts.queries, "seed": opts.seed, "table": r}),
        )?;
        rows.push(Row {
            name: exp.name.clone(),
            defense: exp.defense.as_ref().map_or("none", |d| d.name()).to_string(),
            loss: exp.loss.name().to_string(),
            recall_at_1: m.recall_at(1).unwrap_or(0.0),
            map_at_r: m.retrieval.map_at_r,
            nmi: m.nmi,
            ers: r.ers,
            ars: r.ars,
            train_seconds: report.train_seconds,
            epochs: report.epochs.len(),
            verdict: m.health.map(|h| h.verdict),
            run: dir,
        });
        write_tables(&rows, opts)?;
    }
    Ok(rows)
}

impl Row {
    /// The table's cells after the name, formatted (Markdown and the HTML report share them).
    pub fn cells(&self) -> [String; 9] {
        [
            self.defense.clone(),
            self.loss.clone(),
            format!("{:.4}", self.recall_at_1),
            format!("{:.4}", self.map_at_r),
            self.nmi.map_or("-".into(), |v| format!("{v:.4}")),
            format!("{:.1}", self.ers),
            format!("{:.1}", self.ars),
            format!("{:.0}", self.train_seconds),
            self.epochs.to_string(),
        ]
    }
}

/// The table's column names after `experiment`.
pub const COLUMNS: [&str; 9] = [
    "defense", "loss", "R@1", "MAP@R", "NMI", "ERS", "ARS", "train s", "epochs",
];

/// The names of the experiments whose model collapsed or ranks at chance.
pub fn unhealthy(rows: &[Row]) -> Vec<&str> {
    rows.iter()
        .filter(|r| r.verdict.is_some_and(|v| !v.is_healthy()))
        .map(|r| r.name.as_str())
        .collect()
}

/// The Markdown table of the rows.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = format!(
        "| experiment | {} |\n|---|{}\n",
        COLUMNS.join(" | "),
        "---|".repeat(COLUMNS.len())
    );
    for r in rows {
        let flag = match r.verdict {
            Some(Verdict::Collapsed) => " (COLLAPSED)",
            Some(Verdict::AtChance) => " (AT CHANCE)",
            _ => "",
        };
        s.push_str(&format!("| {}{flag} | {} |\n", r.name, r.cells().join(" | ")));
    }
    s
}

fn write_tables(rows: &[Row], opts: &CompareOptions) -> Result<()> {
    let json = serde_json::json!({
        "pgd": opts.pgd, "method": opts.method, "queries": opts.queries, "seed": opts.seed, "rows": rows
    });
    write_atomic(
        &opts.out.join("compare.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    write_atomic(&opts.out.join("compare.md"), markdown(rows).as_bytes())
}
