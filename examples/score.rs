//! Scores a trained run folder on its test split, with the calls `rdml eval --model DIR` makes:
//! Recall@k, MAP@R, mAP, NMI and π_ratio.
//!
//! `cargo run --release --example score -- runs/example`

use rdml::train::load_run;
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "runs/example".into());
    let device = rdml::device::open(None, &[])?.device;
    // The run's config, weights and test split (from where its config says, `None`).
    let run = load_run(Path::new(&dir), None, &device)?;
    let m = rdml::eval::evaluate(&run.net, &run.test, &run.exp.eval, run.exp.seed, &device)?;
    println!("{dir} on {}:", run.test.query.name);
    print!("{}", rdml::tables::metrics_table(&m));
    Ok(())
}
