//! `rdml report`, `rdml presets`, `rdml devices` and `rdml bench-step`.

use super::{Outcome, open_device};
use anyhow::{Context as _, Result};
use rdml::config::{Experiment, PRESETS};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// A run folder written by `rdml train`, or a folder written by `rdml compare`.
    pub dir: PathBuf,
    /// The test data, when not where the run's config says (for the retrieval grid).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Queries in the retrieval grid (0: none).
    #[arg(long, default_value_t = rdml::html::GRID_QUERIES)]
    pub grid: usize,
}

pub fn report(args: ReportArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let ReportArgs { dir, data, grid } = args;
    let device = open_device(flag, &[], quiet)?;
    let opts = rdml::html::ReportOptions {
        data,
        grid_queries: grid,
        ..Default::default()
    };
    let p = rdml::html::refresh(&dir, &opts, &device)?;
    println!("Wrote {}.", p.display());
    Ok(Outcome::Done)
}

#[derive(clap::Args)]
pub struct PresetsArgs {
    /// The preset to print (its TOML).
    pub name: Option<String>,
}

pub fn presets(args: PresetsArgs, flag: Option<&str>, _quiet: bool) -> Result<Outcome> {
    super::no_device(flag, "presets")?;
    let PresetsArgs { name } = args;
    match name {
        None => {
            for (n, text) in PRESETS {
                let first = text.lines().next().unwrap_or("").trim_start_matches("# ");
                println!("{n:<42} {first}");
            }
        }
        Some(n) => {
            let (_, text) = PRESETS
                .iter()
                .find(|p| p.0 == n)
                .with_context(|| format!("no preset '{n}'"))?;
            print!("{text}");
        }
    };
    Ok(Outcome::Done)
}

#[derive(clap::Args)]
pub struct DevicesArgs {}

pub fn devices(_args: DevicesArgs, flag: Option<&str>, _quiet: bool) -> Result<Outcome> {
    super::no_device(flag, "devices")?;
    for l in rdml::device::list()? {
        println!("{}", rdml::field::render(&l, rdml::field::Words::CommandLine));
    }
    Ok(Outcome::Done)
}

#[derive(clap::Args)]
pub struct BenchStepArgs {
    /// A TOML experiment config, or a preset name.
    #[arg(long)]
    pub config: String,
    /// Override any config key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The defense as an inline TOML table, or `none`.
    #[arg(long)]
    pub defense: Option<String>,
    /// Timed steps (after one warm-up step).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// Random images of this shape (C,H,W, e.g. 3,224,224) in the sampler's class layout
    /// instead of the config's data (which then need not be present).
    #[arg(long, value_name = "C,H,W")]
    pub random_images: Option<String>,
    /// Also write the timing as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace --out when it exists (never a file of a run folder: model.safetensors,
    /// run.json, config.toml, …).
    #[arg(long)]
    pub overwrite: bool,
}

pub fn bench_step(args: BenchStepArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let BenchStepArgs {
        config,
        set,
        defense,
        steps,
        random_images,
        out,
        overwrite,
    } = args;
    let exp = Experiment::load_with_defense(&config, &set, defense.as_deref())?;
    if let Some(o) = &out {
        rdml::output::check(o, overwrite).context("--out")?;
    }
    let shape = match random_images.as_deref() {
        None => None,
        Some(s) => {
            let v: Vec<usize> = s
                .split(',')
                .map(|d| d.trim().parse::<usize>().ok().filter(|&d| d > 0))
                .collect::<Option<_>>()
                .with_context(|| format!("--random-images {s}: expected C,H,W, three positive integers"))?;
            let [c, h, w] = v[..] else {
                anyhow::bail!("--random-images {s}: expected C,H,W, three positive integers");
            };
            Some([c, h, w])
        }
    };
    let device = open_device(flag, &[&exp], quiet)?;
    let t = rdml::train::time_steps(&exp, steps, shape, &device)?;
    println!(
        "{}: {:.4} s per training step (mean of {}, batch {} of {:?})",
        exp.name, t.seconds_per_step, t.steps, t.batch, t.item_shape
    );
    if let Some(o) = out {
        rdml::output::write_json(&o, &t, overwrite).context("--out")?;
    }
    Ok(Outcome::Done)
}
