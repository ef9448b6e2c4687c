//! Trains the quickstart model (Fashion-MNIST shipped inside rdml, the C2F2 network, triplet loss)
//! for one epoch into a run folder, with the calls `rdml train --config quickstart --epochs 1
//! --out DIR --overwrite` makes, and prints its test metrics.
//!
//! `cargo run --release --example train -- runs/example` (then `--example score` and
//! `--example attack` on the same folder).

use rdml::config::Experiment;
use rdml::train::{TrainOptions, train};

fn main() -> anyhow::Result<()> {
    let out = std::env::args().nth(1).unwrap_or_else(|| "runs/example".into());
    // A preset name or a TOML file, `--set` overrides, and an optional `--defense` table.
    let exp = Experiment::load_with_defense("quickstart", &["train.epochs=1".into()], None)?;
    // `--device` (here none) against the config's `train.device`, else the CPU.
    let selected = rdml::device::open(None, &[exp.train.device])?;
    eprintln!("device: {}", selected.description);
    let options = TrainOptions {
        out: out.clone().into(),
        resume: false,
        overwrite: true,
        progress: true,
    };
    let report = train(&exp, &options, &selected.device)?;
    if let Some(m) = &report.final_metrics {
        print!("{}", rdml::tables::metrics_table(m));
    }
    println!("{out}: {:.0} s of training", report.train_seconds);
    Ok(())
}
