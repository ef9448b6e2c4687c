//! Issue 5's per-iteration loss cost: for batch sizes B = 80…640 (M = 5 images per class, 1024-d
//! unit embeddings as in the paper's Figure 3), the time of one loss evaluation plus its backward
//! pass to the embeddings, for each DRO variant and the anchor-based losses. The network's share of
//! an iteration is the same for every loss, so only the loss is timed.
//! Usage: cargo run --release --example dro_timing -- [REPS] [OUT.json]

use anyhow::Result;
use burn::tensor::{Device, Tensor, TensorData};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use rdml::loss::{LossConfig, LossParams, compute};
use std::time::Instant;

fn config(name: &str, b: usize) -> Result<LossConfig> {
    let text = match name {
        "dro-topk" => format!("kind = \"dro\"\nvariant = \"top-k\"\nk = {}", 2 * b),
        "dro-topk-pn" => format!("kind = \"dro\"\nvariant = \"top-k-pn\"\nk = {}", 2 * b),
        "dro-kl" => "kind = \"dro\"\nvariant = \"kl\"\ngamma = 0.1".into(),
        "multi-similarity" => "kind = \"multi-similarity\"\nalpha = 2.0\nbeta = 50.0".into(),
        "lifted" => "kind = \"lifted\"".into(),
        "triplet-semihard" => "kind = \"triplet\"\nminer = \"semihard\"\nanchors = \"all\"".into(),
        "margin-distance" => "kind = \"margin\"\nminer = \"distance\"\nanchors = \"all\"\nbeta_lr = 0.0".into(),
        _ => anyhow::bail!("unknown loss {name}"),
    };
    Ok(toml::from_str(&text)?)
}

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let reps: usize = a.get(1).map(|s| s.parse()).transpose()?.unwrap_or(5);
    let out = a.get(2).cloned().unwrap_or_else(|| "bench/out/dro_timing.json".into());
    let dim = 1024;
    let names = [
        "dro-topk",
        "dro-topk-pn",
        "dro-kl",
        "multi-similarity",
        "lifted",
        "triplet-semihard",
        "margin-distance",
    ];
    let device = Device::default().autodiff();
    let mut rows = vec![];
    for b in [80usize, 160, 320, 480, 640] {
        let mut rng = ChaCha8Rng::seed_from_u64(b as u64);
        let mut e = vec![0f32; b * dim];
        for row in e.chunks_mut(dim) {
            row.iter_mut().for_each(|v| *v = StandardNormal.sample(&mut rng));
            let s = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            row.iter_mut().for_each(|v| *v /= s);
        }
        let labels: Vec<u32> = (0..b as u32).map(|i| i / 5).collect();
        let mut line = serde_json::Map::new();
        line.insert("batch".into(), b.into());
        for name in names {
            let cfg = config(name, b)?;
            let params = LossParams::new(&cfg, &device);
            let mut best = f64::MAX;
            for r in 0..reps + 1 {
                let x = Tensor::<2>::from_data(TensorData::new(e.clone(), [b, dim]), &device).require_grad();
                let t = Instant::now();
                let l = compute(&cfg, x.clone(), &labels, &params, &mut rng)?.loss;
                let g = l.backward();
                let _ = x.grad(&g).map(|t| t.into_data());
                let s = t.elapsed().as_secs_f64();
                if r > 0 {
                    best = best.min(s); // the first run warms caches and allocators
                }
            }
            line.insert(name.into(), (best * 1e3).into());
            eprintln!("B={b} {name}: {:.2} ms", best * 1e3);
        }
        rows.push(serde_json::Value::Object(line));
    }
    let json = serde_json::json!({"unit": "ms per loss forward+backward (best of reps)", "dim": dim, "per_class": 5, "rows": rows});
    rdml::atomic::write_atomic(
        std::path::Path::new(&out),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(())
}
