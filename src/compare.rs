//! Side-by-side comparison of experiments: each config is trained (or its finished run loaded, or
//! an interrupted one resumed) under `DIR/<name>`, its test metrics taken from the run, the
//! robustness suite run on it, and one table written — clean R@1, MAP@R, NMI, ERS, ARS and
//! training time per experiment. With several training seeds, each experiment is trained once
//! per seed (`DIR/<name>-seed<S>`) and the table gives each column's mean ± sample std over the
//! seeds, as the DML literature reports (Roth et al.).

use crate::attack::result::MeanStd;
use crate::config::Experiment;
use crate::eval::health::Verdict;
use crate::run_dir::{Found, config_diff, inspect};
use crate::scoring::options::{Resolved, RunScoring, ScoringOptions};
use crate::train::{RunReport, TrainOptions, train};
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
    #[serde(serialize_with = "crate::output::path_text")]
    pub run: PathBuf,
    /// The health verdict of the run's final evaluation.
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// What the suite runs with.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub out: PathBuf,
    /// The suite's budget, method, queries and seed, as `rdml robustness` takes them.
    pub scoring: ScoringOptions,
    pub progress: bool,
    /// Train every experiment again, replacing finished runs in `out`.
    pub overwrite: bool,
    /// Training seeds per experiment: its config's `seed`, `seed + 1`, …
    pub seeds: usize,
}

/// One experiment over its training seeds: each column's mean ± sample std.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedSummary {
    pub name: String,
    pub defense: String,
    pub loss: String,
    pub seeds: Vec<u64>,
    #[serde(rename = "recall@1")]
    pub recall_at_1: MeanStd,
    #[serde(rename = "map@r")]
    pub map_at_r: MeanStd,
    /// `None` unless every seed's run computed NMI.
    pub nmi: Option<MeanStd>,
    pub ers: MeanStd,
    pub ars: MeanStd,
    pub train_seconds: MeanStd,
    pub epochs: usize,
    /// The names of the seeds' runs that collapsed or rank at chance.
    pub unhealthy: Vec<String>,
}

impl SeedSummary {
    /// Summarises one experiment's rows (one per seed).
    pub fn of(name: &str, rows: &[Row], seeds: Vec<u64>) -> Self {
        let col = |f: fn(&Row) -> f64| MeanStd::of(&rows.iter().map(f).collect::<Vec<_>>());
        let nmi: Option<Vec<f64>> = rows.iter().map(|r| r.nmi).collect();
        Self {
            name: name.to_string(),
            defense: rows.first().map_or_else(String::new, |r| r.defense.clone()),
            loss: rows.first().map_or_else(String::new, |r| r.loss.clone()),
            seeds,
            recall_at_1: col(|r| r.recall_at_1),
            map_at_r: col(|r| r.map_at_r),
            nmi: nmi.map(|v| MeanStd::of(&v)),
            ers: col(|r| r.ers),
            ars: col(|r| r.ars),
            train_seconds: col(|r| r.train_seconds),
            epochs: rows.first().map_or(0, |r| r.epochs),
            unhealthy: unhealthy(rows).into_iter().map(str::to_string).collect(),
        }
    }
}

/// The experiments `compare` trains: each config once, or once per seed, renamed
/// `<name>-seed<S>` with `seed = S`.
pub fn expand_seeds(exps: &[Experiment], seeds: usize) -> Vec<Experiment> {
    exps.iter()
        .flat_map(|e| {
            (0..seeds as u64).map(move |k| {
                let mut r = e.clone();
                if seeds > 1 {
                    r.seed = e.seed.wrapping_add(k);
                    r.name = format!("{}-seed{}", e.name, r.seed);
                }
                r
            })
        })
        .collect()
}

/// Each experiment's summary over its seeds' rows (laid out as [`expand_seeds`] orders them).
pub fn summaries(exps: &[Experiment], rows: &[Row], seeds: usize) -> Vec<SeedSummary> {
    exps.iter()
        .zip(rows.chunks(seeds.max(1)))
        .map(|(e, chunk)| {
            let s = (0..seeds as u64).map(|k| e.seed.wrapping_add(k)).collect();
            SeedSummary::of(&e.name, chunk, s)
        })
        .collect()
}

fn finished(dir: &Path) -> Option<RunReport> {
    crate::run_dir::status(dir).filter(|s| s.completed)?;
    crate::read::record(&dir.join(crate::run_dir::RUN))
}

/// Trains (or loads) and scores every experiment; writes `compare.json` and `compare.md`.
/// A finished run is reused only when its resolved config equals the requested one; an
/// interrupted one is resumed (with the same config, see [`train`]).
pub fn compare(configs: &[Experiment], opts: &CompareOptions, device: &Device) -> Result<Vec<Row>> {
    anyhow::ensure!(opts.seeds >= 1, "⟨seeds⟩ must be ≥ 1");
    let scoring = opts.scoring.resolve(Default::default(), 1)?;
    check_seeds(configs, opts.seeds)?;
    let exps = expand_seeds(configs, opts.seeds);
    check_names(&exps)?;
    for exp in &exps {
        exp.to_toml().with_context(|| format!("'{}'", exp.name))?;
    }
    table::check_out(&opts.out)?;
    let mut rows = vec![];
    for exp in &exps {
        let dir = opts.out.join(&exp.name);
        let report = trained(exp, &dir, opts, device)?;
        rows.push(scored(exp, dir, &report, &scoring, opts, device)?);
        write_tables(&rows, configs, opts, &scoring)?;
    }
    Ok(rows)
}

/// Every seed `--seeds` will use fits a config's seed (TOML integers are signed 64-bit), checked
/// before the first run trains.
fn check_seeds(configs: &[Experiment], seeds: usize) -> Result<()> {
    for e in configs {
        let last = e.seed.checked_add(seeds as u64 - 1).filter(|&s| s <= i64::MAX as u64);
        anyhow::ensure!(
            last.is_some(),
            "⟨seeds⟩ {seeds}: '{}' starts at seed = {}, and its last seed would pass {}, the largest seed a \
             config holds (TOML integers are signed 64-bit); lower its seed or ⟨seeds⟩",
            e.name,
            e.seed,
            i64::MAX
        );
    }
    Ok(())
}

/// Every name is a plain folder name (it names the run folder under `--out`), and no two agree.
fn check_names(exps: &[Experiment]) -> Result<()> {
    let mut names = std::collections::HashSet::new();
    for exp in exps {
        let mut parts = Path::new(&exp.name).components();
        let single = matches!(parts.next(), Some(std::path::Component::Normal(_))) && parts.next().is_none();
        anyhow::ensure!(
            single && !exp.name.contains(['/', '\\']),
            "name = '{}': the config's name names its run folder under ⟨out⟩; expected a plain \
             folder name (no '/', no '..', not absolute)",
            exp.name
        );
        anyhow::ensure!(
            names.insert(exp.name.clone()),
            "two configs are named '{}': names must differ (they name the run folders)",
            exp.name
        );
    }
    Ok(())
}

/// The experiment's finished run in `dir` when its config is the requested one (an error when it
/// differs, unless `--overwrite`); otherwise trained there, resuming an interrupted run.
fn trained(exp: &Experiment, dir: &Path, opts: &CompareOptions, device: &Device) -> Result<RunReport> {
    let wanted = exp.to_toml()?;
    if let Some(r) = finished(dir).filter(|_| !opts.overwrite) {
        let saved = crate::read::text(
            &dir.join(crate::run_dir::CONFIG),
            crate::read::Follow::NoLinks,
            crate::read::BOOKKEEPING,
        )
        .unwrap_or_default();
        let diff = config_diff(&saved, &wanted);
        anyhow::ensure!(
            diff.is_empty(),
            "{} holds a finished run of '{}' with a different configuration (differs at {}): compare reuses a run only when its config equals the requested one; pass ⟨overwrite!⟩ to train it again, or choose another ⟨out⟩",
            dir.display(),
            exp.name,
            diff.join(", ")
        );
        return Ok(r);
    }
    let resumable = matches!(inspect(dir)?, Found::Resumable { .. });
    let options = TrainOptions {
        out: dir.to_path_buf(),
        resume: resumable && !opts.overwrite,
        overwrite: opts.overwrite,
        progress: opts.progress,
    };
    train(exp, &options, device)
}

/// The run's row: its final test metrics and the robustness suite run on it, whose record is
/// kept in the run as `rdml robustness` keeps it (one session, one record, one policy).
fn scored(
    exp: &Experiment,
    dir: PathBuf,
    report: &RunReport,
    scoring: &Resolved,
    opts: &CompareOptions,
    device: &Device,
) -> Result<Row> {
    let m = report
        .final_metrics
        .clone()
        .with_context(|| format!("{}: the run has no final metrics", dir.display()))?;
    let run = RunScoring {
        progress: opts.progress,
        ..Default::default()
    };
    let scored = crate::scoring::open_run(&dir, &run, scoring, device)?.robustness()?;
    scored.store()?;
    let r = &scored.record.table;
    Ok(Row {
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
    })
}

mod table;
use table::write_tables;
pub use table::{COLUMNS, LEDGER, markdown, markdown_summary, tables, unhealthy, write_report};

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, r1: f64, ers: f64, nmi: Option<f64>) -> Row {
        Row {
            name: name.into(),
            defense: "act".into(),
            loss: "triplet".into(),
            recall_at_1: r1,
            map_at_r: r1 / 2.0,
            nmi,
            ers,
            ars: ers + 1.0,
            train_seconds: 10.0,
            epochs: 2,
            run: PathBuf::from(name),
            verdict: None,
        }
    }

    /// `--seeds 2`: runs named per seed, each column's mean ± sample std (n − 1) in the table.
    #[test]
    fn seeds_expand_and_summarise_as_mean_and_sample_std() {
        let exp = Experiment::load("quickstart", &[]).unwrap();
        let runs = expand_seeds(std::slice::from_ref(&exp), 2);
        let names: Vec<_> = runs.iter().map(|e| (e.name.clone(), e.seed)).collect();
        assert_eq!(
            names,
            vec![
                (format!("{}-seed{}", exp.name, exp.seed), exp.seed),
                (format!("{}-seed{}", exp.name, exp.seed + 1), exp.seed + 1)
            ]
        );
        assert_eq!(expand_seeds(std::slice::from_ref(&exp), 1)[0].name, exp.name);
        let rows = [row("a", 0.6, 30.0, Some(0.5)), row("b", 0.8, 40.0, None)];
        let s = &summaries(std::slice::from_ref(&exp), &rows, 2)[0];
        assert!((s.recall_at_1.mean - 0.7).abs() < 1e-12);
        assert!((s.recall_at_1.std - 0.02f64.sqrt()).abs() < 1e-12);
        assert!((s.ers.std - 50f64.sqrt()).abs() < 1e-12);
        assert!(s.nmi.is_none(), "one seed has no NMI");
        let md = tables(&rows, std::slice::from_ref(&exp), 2);
        assert!(
            md.contains("| 0.7000 ± 0.1414 | 0.3500 ± 0.0707 | - | 35.0 ± 7.1 | 36.0 ± 7.1 |"),
            "{md}"
        );
        assert!(
            md.contains(&format!("| {} ({}, {}) |", exp.name, exp.seed, exp.seed + 1)),
            "{md}"
        );
    }
}
