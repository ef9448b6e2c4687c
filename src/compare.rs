//! Side-by-side comparison of experiments: each config is trained (or its finished run loaded, or
//! an interrupted one resumed) under `DIR/<name>`, its test metrics taken from the run, the
//! robustness suite run on it, and one table written — clean R@1, MAP@R, NMI, ERS, ARS and
//! training time per experiment.

use crate::attack::engine::Pgd;
use crate::attack::suite::{Context, robustness};
use crate::config::Experiment;
use crate::report::write_atomic;
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
    pub recall_at_1: f64,
    pub map_at_r: f64,
    pub nmi: Option<f64>,
    pub ers: f64,
    pub ars: f64,
    pub train_seconds: f64,
    pub epochs: usize,
    pub run: PathBuf,
}

/// What the suite runs with.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub out: PathBuf,
    pub pgd: Pgd,
    pub queries: usize,
    pub batch: usize,
    pub seed: u64,
    pub progress: bool,
}

fn finished(dir: &Path) -> Option<RunReport> {
    let r: RunReport = serde_json::from_slice(&std::fs::read(dir.join("run.json")).ok()?).ok()?;
    r.completed.then_some(r)
}

/// Trains (or loads) and scores every experiment; writes `compare.json` and `compare.md`.
pub fn compare(exps: &[Experiment], opts: &CompareOptions, device: &Device) -> Result<Vec<Row>> {
    std::fs::create_dir_all(&opts.out).with_context(|| format!("cannot create {}", opts.out.display()))?;
    let mut names = std::collections::HashSet::new();
    let mut rows = vec![];
    for exp in exps {
        anyhow::ensure!(
            names.insert(exp.name.clone()),
            "two configs are named '{}': names must differ (they name the run folders)",
            exp.name
        );
        let dir = opts.out.join(&exp.name);
        let report = match finished(&dir) {
            Some(r) => r,
            None => {
                let resume = dir.join("checkpoint").join("state.json").exists();
                train(
                    exp,
                    &TrainOptions {
                        out: dir.clone(),
                        resume,
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
        let (run_exp, net) = load_run(&dir, device)?;
        let splits = run_exp.data.load(run_exp.seed)?;
        let ctx = Context::new(&net, &splits.test.query, device, false)?;
        let r = robustness(&ctx, &opts.pgd, opts.queries, opts.batch, opts.seed, opts.progress)?;
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
            run: dir,
        });
        write_tables(&rows, opts)?;
    }
    Ok(rows)
}

/// The Markdown table of the rows.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from("| experiment | defense | loss | R@1 | MAP@R | NMI | ERS | ARS | train s | epochs |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.4} | {:.4} | {} | {:.1} | {:.1} | {:.0} | {} |\n",
            r.name,
            r.defense,
            r.loss,
            r.recall_at_1,
            r.map_at_r,
            r.nmi.map_or("-".into(), |v| format!("{v:.4}")),
            r.ers,
            r.ars,
            r.train_seconds,
            r.epochs
        ));
    }
    s
}

fn write_tables(rows: &[Row], opts: &CompareOptions) -> Result<()> {
    let json = serde_json::json!({
        "pgd": opts.pgd, "queries": opts.queries, "seed": opts.seed, "rows": rows
    });
    write_atomic(
        &opts.out.join("compare.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    write_atomic(&opts.out.join("compare.md"), markdown(rows).as_bytes())
}
