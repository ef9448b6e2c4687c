//! `rdml eval`.

use super::{Outcome, open_device, outcome, report_health};
use anyhow::{Context as _, Result};
use rdml::tables::metrics_table;
use rdml::train::load_run;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// A run folder written by `rdml train`.
    #[arg(long)]
    pub model: PathBuf,
    /// Use this data folder instead of the one in the run's config.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the metrics as JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace --out when it exists (never a file of a run folder: model.safetensors,
    /// run.json, config.toml, …).
    #[arg(long)]
    pub overwrite: bool,
    /// Infer with this batch-norm set instead of the clean set 0 (MDProp's ablation of
    /// inference with an auxiliary set; the model must have been trained with it).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub bn_set: usize,
}

pub fn eval(args: EvalArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let EvalArgs {
        model,
        data,
        json,
        out,
        overwrite,
        bn_set,
    } = args;
    if let Some(o) = &out {
        rdml::output::check(o, overwrite).context("--out")?;
    }
    let device = open_device(flag, &[], json || quiet)?;
    let mut run = load_run(&model, data.as_deref(), &device)?;
    if bn_set != 0 {
        run.net = run.net.with_inference_bn_set(bn_set).context("--bn-set")?;
    }
    let m = rdml::eval::evaluate(&run.net, &run.test, &run.exp.eval, run.exp.seed, &device)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        let set = if bn_set != 0 {
            format!(" (batch-norm set {bn_set})")
        } else {
            String::new()
        };
        println!("{}{set} on {}:", model.display(), run.test.query.name);
        print!("{}", metrics_table(&m));
    }
    if let Some(o) = out {
        rdml::output::write_json(&o, &m, overwrite).context("--out")?;
    }
    Ok(outcome(report_health(&m)))
}
