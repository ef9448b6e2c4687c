//! `rdml quickstart` and `rdml train`.

use super::{Outcome, open_device, outcome, refresh_report, report_health};
use anyhow::Result;
use rdml::tables::metrics_table;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct QuickstartArgs {
    /// The run folder (default: runs/quickstart, or the first free runs/quickstart-N when it
    /// holds a run).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the run in --out.
    #[arg(long)]
    pub overwrite: bool,
    /// Folder with the full Fashion-MNIST IDX files (default: /usr/share/datasets/fashion-mnist
    /// when present, else the embedded test split).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Training epochs (default: 4 on the embedded split, 1 of 200 batches on the full set).
    #[arg(long)]
    pub epochs: Option<usize>,
}

pub fn quickstart(args: QuickstartArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let QuickstartArgs {
        out,
        overwrite,
        data,
        epochs,
    } = args;
    let t0 = Instant::now();
    let qs = rdml::quickstart::Quickstart::new(out, overwrite, data, epochs)?;
    let device = open_device(flag, &[&qs.exp], quiet)?;
    if !quiet {
        eprintln!("{}", qs.describe());
    }
    let (rep, m) = qs.train(&device, !quiet)?;
    println!(
        "\nTest metrics after {} epochs ({:.0} s of training):",
        qs.exp.train.epochs, rep.train_seconds
    );
    print!("{}", metrics_table(&m));
    if !report_health(&m) {
        return Ok(Outcome::Unhealthy);
    }
    // How fragile is it?
    let (nn, pgd) = qs.attack(&rep, &m, &device, t0)?;
    println!(
        "\nNearest-neighbour PGD attack (ε = 77/255, {} steps of 3/255) on {} test queries:\n  Recall@1 clean {:.1} % → attacked {:.1} % ({:.0} s)",
        pgd.steps,
        nn.queries,
        nn.score("recall@1:clean").unwrap_or(0.0),
        nn.score("recall@1").unwrap_or(0.0),
        nn.seconds
    );
    refresh_report(&qs.out, None, &device, true);
    println!(
        "\nWrote {} and report.html (model, run.json, log.jsonl in the same folder).",
        qs.report_path().display()
    );
    Ok(Outcome::Done)
}

#[derive(clap::Args)]
pub struct TrainArgs {
    /// A TOML experiment config, or a preset name (`rdml presets` lists them).
    #[arg(long)]
    pub config: String,
    /// The run folder (new, empty, or an rdml run to --resume or --overwrite).
    #[arg(long)]
    pub out: PathBuf,
    /// Read the data set from this folder (the config's `data.root`).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Continue the run in --out from its last completed epoch.
    #[arg(long)]
    pub resume: bool,
    /// Replace the finished or interrupted run in --out (only rdml's files are removed).
    #[arg(long)]
    pub overwrite: bool,
    /// Train this many epochs (the config's `train.epochs`).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Stop each epoch after this many batches (`train.max_batches`; for quick trials).
    #[arg(long)]
    pub max_batches: Option<usize>,
    /// Override any config key, e.g. --set loss.margin=0.1 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The defense as an inline TOML table, e.g. '{kind="act",eps=0.302,step=0.0118,steps=32}',
    /// or `none` to train the config without its defense.
    #[arg(long)]
    pub defense: Option<String>,
}

pub fn train(args: TrainArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let TrainArgs {
        config,
        out,
        data,
        resume,
        overwrite,
        epochs,
        max_batches,
        set,
        defense,
    } = args;
    let job = rdml::job::TrainJob {
        config,
        set: rdml::config::SetKeys::Texts(set),
        epochs,
        max_batches,
        defense,
        data,
        out: out.clone(),
        resume,
        overwrite,
        progress: !quiet,
    };
    let (exp, rep) = job.run_on(|exp| open_device(flag, &[exp], quiet))?;
    let mut healthy = true;
    if let Some(m) = &rep.final_metrics {
        println!("Test metrics ({}):", exp.name);
        print!("{}", metrics_table(m));
        healthy = report_health(m);
    }
    println!(
        "Wrote {}/model.safetensors, run.json and report.html ({:.0} s of training).",
        out.display(),
        rep.train_seconds
    );
    Ok(outcome(healthy))
}
