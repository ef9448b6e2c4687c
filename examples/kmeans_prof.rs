//! Times NMI's k-means alone on sphere embeddings (class centres + noise, as
//! bench/sphere_embeddings.py draws them, with rdml's own generator).
//! Usage: cargo run --release --example kmeans_prof -- N C D [REPEATS]
use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use rdml::eval::knn::Embeddings;
use std::time::Instant;

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).context("N")?.parse()?;
    let c: usize = a.get(2).context("C")?.parse()?;
    let d: usize = a.get(3).context("D")?.parse()?;
    let reps: usize = a.get(4).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut centres = vec![0f32; c * d];
    for row in centres.chunks_mut(d) {
        row.iter_mut().for_each(|v| *v = StandardNormal.sample(&mut rng));
        let s = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        row.iter_mut().for_each(|v| *v /= s);
    }
    let per = n / c;
    let labels: Vec<u32> = (0..c * per).map(|i| (i / per) as u32).collect();
    let mut x = vec![0f32; c * per * d];
    for (i, row) in x.chunks_mut(d).enumerate() {
        let cen = &centres[labels[i] as usize * d..][..d];
        for (v, &m) in row.iter_mut().zip(cen) {
            let z: f32 = StandardNormal.sample(&mut rng);
            *v = m + z * 2.4 / (d as f32).sqrt();
        }
        let s = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        row.iter_mut().for_each(|v| *v /= s);
    }
    let e = Embeddings::new(x, c * per, d)?;
    for _ in 0..reps {
        let t = Instant::now();
        let a = rdml::eval::cluster::kmeans(&e, c, 25, 0, &rdml::default_device())?;
        println!(
            "{:.3} s  NMI {:.4}",
            t.elapsed().as_secs_f64(),
            rdml::eval::cluster::nmi(&a, &labels)
        );
    }
    Ok(())
}
