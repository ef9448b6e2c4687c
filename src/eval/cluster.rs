//! Clustering quality: k-means (k-means++ seeding, Lloyd iterations, seeded) and the normalised
//! mutual information between cluster ids and labels, with sklearn's default arithmetic-mean
//! normalisation `NMI = I(U;V) / ((H(U) + H(V)) / 2)`.

use super::knn::{Embeddings, scan_rows};
use anyhow::Result;
use burn::tensor::Device;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::collections::HashMap;

/// Assigns each point to the nearest of `k` centroids found by k-means++ and at most `iters` Lloyd
/// iterations (stops early when no assignment changes).
pub fn kmeans(x: &Embeddings, k: usize, iters: usize, seed: u64, device: &Device) -> Result<Vec<u32>> {
    let (n, d) = (x.n, x.dim);
    let k = k.clamp(1, n.max(1));
    if n == 0 {
        return Ok(vec![]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // k-means++: each next centre drawn with probability ∝ squared distance to the nearest centre.
    let mut centres = Vec::with_capacity(k * d);
    let first = rng.random_range(0..n);
    centres.extend_from_slice(x.row(first));
    let sq = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(u, v)| (u - v) * (u - v)).sum::<f32>();
    let mut best: Vec<f32> = (0..n).into_par_iter().map(|i| sq(x.row(i), x.row(first))).collect();
    for _ in 1..k {
        let total: f64 = best.iter().map(|&v| v as f64).sum();
        let next = if total <= 0.0 {
            rng.random_range(0..n)
        } else {
            let mut t = rng.random::<f64>() * total;
            let mut pick = n - 1;
            for (i, &v) in best.iter().enumerate() {
                t -= v as f64;
                if t <= 0.0 {
                    pick = i;
                    break;
                }
            }
            pick
        };
        let c = x.row(next).to_vec();
        best.par_iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = b.min(sq(x.row(i), &c)));
        centres.extend_from_slice(&c);
    }
    let mut assign = vec![u32::MAX; n];
    for _ in 0..iters.max(1) {
        let cent = Embeddings::new(centres.clone(), k, d)?;
        let new: Vec<u32> = scan_rows(x, &cent, device, |_, row| {
            let mut bi = 0;
            for (j, &v) in row.iter().enumerate() {
                if v < row[bi] {
                    bi = j;
                }
            }
            bi as u32
        })?;
        let changed = new != assign;
        assign = new;
        if !changed {
            break;
        }
        let mut sums = vec![0f64; k * d];
        let mut counts = vec![0usize; k];
        for (i, &a) in assign.iter().enumerate() {
            let c = a as usize;
            counts[c] += 1;
            for (s, &v) in sums[c * d..(c + 1) * d].iter_mut().zip(x.row(i)) {
                *s += v as f64;
            }
        }
        for c in 0..k {
            if counts[c] > 0 {
                for j in 0..d {
                    centres[c * d + j] = (sums[c * d + j] / counts[c] as f64) as f32;
                }
            }
        }
    }
    Ok(assign)
}

/// Normalised mutual information (arithmetic mean of the entropies, as sklearn's default).
pub fn nmi(clusters: &[u32], labels: &[u32]) -> f64 {
    let n = clusters.len() as f64;
    if clusters.is_empty() {
        return 0.0;
    }
    let mut joint: HashMap<(u32, u32), f64> = HashMap::new();
    let mut cu: HashMap<u32, f64> = HashMap::new();
    let mut cv: HashMap<u32, f64> = HashMap::new();
    for (&u, &v) in clusters.iter().zip(labels) {
        *joint.entry((u, v)).or_default() += 1.0;
        *cu.entry(u).or_default() += 1.0;
        *cv.entry(v).or_default() += 1.0;
    }
    let h = |m: &HashMap<u32, f64>| -m.values().map(|&c| (c / n) * (c / n).ln()).sum::<f64>();
    let (hu, hv) = (h(&cu), h(&cv));
    let mi: f64 = joint
        .iter()
        .map(|(&(u, v), &c)| (c / n) * ((c * n) / (cu[&u] * cv[&v])).ln())
        .sum();
    if hu == 0.0 && hv == 0.0 {
        return 1.0;
    }
    let denom = (hu + hv) / 2.0;
    if denom <= 0.0 {
        0.0
    } else {
        (mi / denom).clamp(0.0, 1.0)
    }
}

/// π_ratio (Roth et al. 2020, used by MDProp): mean intra-class distance over mean inter-class
/// (centroid) distance, `π_intra / π_inter`, with Euclidean distances. π_intra averages, over the
/// classes with ≥ 2 items, the mean distance between distinct items of the class; π_inter is the
/// mean distance between distinct class centroids. Lower means denser classes.
pub fn pi_ratio(x: &Embeddings, labels: &[u32], device: &Device) -> Result<f64> {
    let mut by_class: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, &l) in labels.iter().enumerate() {
        by_class.entry(l).or_default().push(i);
    }
    let mut classes: Vec<(u32, Vec<usize>)> = by_class.into_iter().collect();
    classes.sort_by_key(|c| c.0);
    let d = x.dim;
    let intra: Vec<f64> = classes
        .par_iter()
        .filter(|(_, items)| items.len() >= 2)
        .map(|(_, items)| {
            let (mut s, mut m) = (0.0f64, 0usize);
            for a in 0..items.len() {
                for b in a + 1..items.len() {
                    let v: f32 = x
                        .row(items[a])
                        .iter()
                        .zip(x.row(items[b]))
                        .map(|(p, q)| (p - q) * (p - q))
                        .sum();
                    s += (v as f64).sqrt();
                    m += 1;
                }
            }
            s / m as f64
        })
        .collect();
    let mut cent = vec![0f32; classes.len() * d];
    for (c, (_, items)) in classes.iter().enumerate() {
        for &i in items {
            for (o, &v) in cent[c * d..(c + 1) * d].iter_mut().zip(x.row(i)) {
                *o += v / items.len() as f32;
            }
        }
    }
    let k = classes.len();
    anyhow::ensure!(
        k >= 2 && !intra.is_empty(),
        "π_ratio needs two classes and a class with two items"
    );
    let cent = Embeddings::new(cent, k, d)?;
    let sums = scan_rows(&cent, &cent, device, |i, row| {
        row.iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &v)| (v as f64).sqrt())
            .sum::<f64>()
    })?;
    let inter = sums.iter().sum::<f64>() / (k * (k - 1)) as f64;
    let intra = intra.iter().sum::<f64>() / intra.len() as f64;
    Ok(if inter > 0.0 { intra / inter } else { f64::INFINITY })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nmi_hand_values() {
        assert!((nmi(&[0, 0, 1, 1], &[5, 5, 7, 7]) - 1.0).abs() < 1e-12);
        assert!(nmi(&[0, 1, 0, 1], &[5, 5, 7, 7]).abs() < 1e-12);
        // sklearn.metrics.normalized_mutual_info_score([0,0,1,1,1], [0,0,0,1,1]) = 0.4325380677663126
        assert!((nmi(&[0, 0, 1, 1, 1], &[0, 0, 0, 1, 1]) - 0.432_538_067_766_312_6).abs() < 1e-6);
    }

    #[test]
    fn kmeans_separates_blobs_and_pi_ratio() {
        let dev = Device::default();
        let mut pts = vec![];
        let mut labels = vec![];
        for c in 0..3 {
            for i in 0..10 {
                pts.push(c as f32 * 10.0 + (i as f32) * 0.01);
                pts.push((i % 3) as f32 * 0.01);
                labels.push(c);
            }
        }
        let x = Embeddings::new(pts, 30, 2).unwrap();
        let a = kmeans(&x, 3, 50, 1, &dev).unwrap();
        assert!((nmi(&a, &labels) - 1.0).abs() < 1e-9);
        let p = pi_ratio(&x, &labels, &dev).unwrap();
        assert!(p > 0.0 && p < 0.01, "{p}");
    }
}
