//! One training step of each defense preset (`fashion-c2f2-<defense>`, and the undefended
//! `fashion-c2f2-triplet` as `none`) on one SPC-2 batch of 128 Fashion-MNIST pairs: mean wall time
//! of STEPS steps after one warm-up step. The PyTorch side is `bench/torch_defense_step.py`.
//! CA-TRIDE is timed in the middle of training (epoch 4 of 8: half the progressive step), as the
//! PyTorch side does. Usage: cargo run --release --example defense_step -- DATA [STEPS] [OUT.json]

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rdml::config::Experiment;
use rdml::data::loader::load_batch;
use rdml::data::sampler;
use rdml::eval::batch_tensor;
use rdml::train::Trainer;
use std::time::Instant;

fn main() -> Result<()> {
    rdml::tune_allocator();
    let a: Vec<String> = std::env::args().collect();
    let data = a.get(1).context("DATA folder of Fashion-MNIST")?;
    let steps: usize = a.get(2).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let out = a
        .get(3)
        .cloned()
        .unwrap_or_else(|| "bench/out/rdml-defense-step.json".into());
    let names = [
        "none",
        "madry",
        "est",
        "act",
        "hm-lga-ics",
        "ca-tride",
        "positive-perturbation",
        "advprop",
        "mdprop",
    ];
    let device = rdml::default_device().autodiff();
    let mut res = serde_json::Map::new();
    for name in names {
        let preset = if name == "none" {
            "fashion-c2f2-triplet".to_string()
        } else {
            format!("fashion-c2f2-{name}")
        };
        let exp = Experiment::load(&preset, &[format!("data.root=\"{data}\"")])?;
        let splits = exp.data.load(exp.seed)?;
        let batches = sampler::epoch_batches(&exp.train.sampler, &splits.train.labels, 0, 0)?;
        let b = load_batch(&splits.train, &batches[0], None)?;
        let mut trainer = Trainer::new(&exp, splits.train.item_shape(), &device)?;
        trainer.defense_state.epoch = 4;
        trainer.defense_state.epochs = 8;
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut total = 0.0;
        for s in 0..=steps {
            let x = batch_tensor(&b, &device);
            let t = Instant::now();
            let (tr, _, _) = trainer.step(&exp, x, &b.labels, &b.positions, &mut rng)?;
            trainer = tr;
            if s > 0 {
                total += t.elapsed().as_secs_f64();
            }
        }
        let per = total / steps as f64;
        eprintln!("{name}: {per:.3} s/step");
        res.insert(name.into(), per.into());
    }
    let json = serde_json::json!({"framework": "rdml", "seconds_per_step": res});
    rdml::atomic::write_atomic(
        std::path::Path::new(&out),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(())
}
