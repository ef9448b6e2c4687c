//! Scores N random unit embeddings (seeded) with rdml's blocked search and writes them to raw
//! files so that `bench/torch_knn.py` scores the same data.
//! Usage: cargo run --release --example knn_bench -- N DIM CLASSES OUT_PREFIX

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use rdml::eval::{EvalConfig, knn::Embeddings, score};
use std::time::Instant;

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).context("N")?.parse()?;
    let dim: usize = a.get(2).context("DIM")?.parse()?;
    let classes: u32 = a.get(3).context("CLASSES")?.parse()?;
    let prefix = a.get(4).context("OUT_PREFIX")?;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut data = vec![0f32; n * dim];
    for row in data.chunks_mut(dim) {
        for v in row.iter_mut() {
            *v = StandardNormal.sample(&mut rng);
        }
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        row.iter_mut().for_each(|v| *v /= norm);
    }
    let labels: Vec<u32> = (0..n as u32).map(|i| i % classes).collect();
    std::fs::write(
        format!("{prefix}.f32"),
        data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )?;
    std::fs::write(
        format!("{prefix}.u32"),
        labels.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )?;
    let e = Embeddings::new(data, n, dim)?;
    let cfg = EvalConfig {
        nmi: false,
        pi_ratio: false,
        ..Default::default()
    };
    let t0 = Instant::now();
    let m = score(&e, &labels, None, &cfg, 0, &rdml::default_device())?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"framework": "rdml", "seconds": secs, "recall": m.retrieval.recall, "map_at_r": m.retrieval.map_at_r, "map": m.retrieval.map})
    );
    Ok(())
}
