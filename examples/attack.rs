//! Attacks a trained run folder, with the calls `rdml attack --model DIR --attack CA+ --profile
//! rob28 --queries 64` and `rdml robustness --model DIR --queries 64` make: one candidate attack,
//! then robrank's ERS suite with its ERS and ARS.
//!
//! `cargo run --release --example attack -- runs/example`

use rdml::attack::profile::{Overrides, resolve};
use rdml::attack::{registry, suite};
use rdml::target::Target;
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "runs/example".into());
    let device = rdml::device::open(None, &[])?.device;
    // The run as an attack target: weights, test split, and the distance it was trained with.
    let target = Target::open(Path::new(&dir), None, 0, &device)?;
    // 128 items attacked at once, and embedded at once for the clean ranking.
    let batch = 128;
    let ctx = target.context(&device, false, batch)?;
    // robrank's MNIST budget (L∞ ε 77/255, 32 steps of 3/255), unchanged by flags or spec keys.
    let pgd = resolve("rob28".parse()?, &Overrides::default(), &Overrides::default(), false)?;
    let method = registry::method("white-box")?;
    let setup = suite::Setup {
        target: &ctx,
        attacker: &ctx,
        method: method.as_ref(),
        pgd,
        queries: 64,
        batch,
        seed: 0,
        per_query: false,
        progress: true,
    };
    let ca = registry::attack("CA+")?;
    let result = suite::run_with(&setup, ca.as_ref())?;
    print!("{}", rdml::tables::attack_table(&result));
    let table = suite::robustness(&setup)?;
    print!("{}", rdml::tables::robustness_table(&table));
    println!("ERS {:.1}   ARS {:.1}", table.ers, table.ars);
    Ok(())
}
