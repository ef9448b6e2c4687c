//! `rdml compare`.

use super::budget::{Budget, profile_help};
use super::{Outcome, open_device, overrides, refresh_report};
use anyhow::Result;
use rdml::config::Experiment;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Experiment configs (TOML files or preset names).
    #[arg(long, num_args = 1.., required = true)]
    pub configs: Vec<String>,
    /// The folder of the comparison; each experiment's run goes to a sub-folder named after it.
    #[arg(long)]
    pub out: PathBuf,
    /// Read every experiment's data set from this folder (their `data.root`).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Overrides applied to every config (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Train this many epochs (every config's `train.epochs`).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Stop each epoch after this many batches (`train.max_batches`).
    #[arg(long)]
    pub max_batches: Option<usize>,
    #[arg(long, default_value = rdml::scoring::defaults::PROFILE, long_help = profile_help())]
    pub profile: rdml::attack::profile::ProfileName,
    #[command(flatten)]
    pub budget: Budget,
    /// Train every config again, replacing finished runs under --out (by default a finished
    /// run is reused when its config equals the requested one, and refused otherwise).
    #[arg(long)]
    pub overwrite: bool,
    /// Train each config with N seeds (its `seed`, `seed` + 1, …; runs named NAME-seedS)
    /// and report each column as mean ± sample std over them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seeds: usize,
}

pub fn compare(args: CompareArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let CompareArgs {
        configs,
        out,
        data,
        set,
        epochs,
        max_batches,
        profile,
        budget,
        overwrite,
        seeds,
    } = args;
    let o = overrides(epochs, max_batches, &set);
    let mut exps = configs
        .iter()
        .map(|c| Experiment::load(c, &o))
        .collect::<Result<Vec<_>>>()?;
    if let Some(d) = &data {
        exps.iter_mut().for_each(|e| e.data.use_folder(d));
    }
    let device = open_device(flag, &exps.iter().collect::<Vec<_>>(), quiet)?;
    let opts = rdml::compare::CompareOptions {
        out: out.clone(),
        scoring: budget.options(profile),
        progress: !quiet,
        overwrite,
        seeds,
    };
    let rows = rdml::compare::compare(&exps, &opts, &device)?;
    for r in &rows {
        refresh_report(&r.run, None, &device, true);
    }
    refresh_report(&out, None, &device, true);
    print!("{}", rdml::compare::tables(&rows, &exps, seeds));
    println!("Wrote {}/compare.md, compare.json and report.html.", out.display());
    let sick = rdml::compare::unhealthy(&rows);
    if !sick.is_empty() {
        eprintln!("warning: collapsed or at chance: {}", sick.join(", "));
        return Ok(Outcome::Unhealthy);
    }
    Ok(Outcome::Done)
}
