//! The profiling examples' data: sphere embeddings (class centres + noise, as
//! bench/sphere_embeddings.py draws them, with rdml's own generator) and the command's numbers.

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use rdml::eval::knn::Embeddings;

/// `N C D [REPEATS]` from the command line.
pub fn args() -> Result<(usize, usize, usize, usize)> {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).context("N")?.parse()?;
    let c: usize = a.get(2).context("C")?.parse()?;
    let d: usize = a.get(3).context("D")?.parse()?;
    let reps: usize = a.get(4).map(|s| s.parse()).transpose()?.unwrap_or(1);
    Ok((n, c, d, reps))
}

/// `n / c` unit vectors of `d` values around each of `c` random unit centres, and their labels.
pub fn embeddings(n: usize, c: usize, d: usize) -> Result<(Embeddings, Vec<u32>)> {
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
    Ok((Embeddings::new(x, c * per, d)?, labels))
}
