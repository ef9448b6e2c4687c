//! Clustering quality: k-means (faiss's random initialisation, Lloyd iterations, seeded) and the
//! normalised mutual information between cluster ids and labels, with sklearn's default
//! arithmetic-mean normalisation `NMI = I(U;V) / ((H(U) + H(V)) / 2)`.

use super::assign::{nearest, squared_norms};
use super::knn::{Embeddings, scan_rows};
use anyhow::Result;
use burn::tensor::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};

/// faiss's default `niter`, which robrank's `faiss.Kmeans(seed=123)` runs (PML's `FaissKMeans`
/// asks 20).
pub const FAISS_NITER: usize = 25;

/// faiss's `max_points_per_centroid`: beyond `k` times this many points, the centroids are fitted
/// on a uniform sample of that size.
const MAX_POINTS_PER_CENTROID: usize = 256;

/// Assigns each point to the nearest of `k` centroids, fitted as faiss's `Kmeans` fits them: the
/// k-means behind the NMI of robrank (`faiss.Kmeans(seed=123)`), pytorch-metric-learning
/// (`FaissKMeans`) and Roth et al.'s code that MDProp reports from. The centroids start at `k`
/// distinct points drawn at random and move by at most `iters` Lloyd iterations (stopping early
/// when no assignment changes), on a uniform sample of `k · 256` points when there are more
/// (faiss's `max_points_per_centroid`). All draws come from `seed`. (k-means++ seeding, which
/// rdml used before, costs `k` passes over the data and moved NMI off the references' by the
/// choice of seeding alone.)
pub fn kmeans(x: &Embeddings, k: usize, iters: usize, seed: u64, device: &Device) -> Result<Vec<u32>> {
    let (n, d) = (x.n, x.dim);
    let k = k.clamp(1, n.max(1));
    if n == 0 {
        return Ok(vec![]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Draws in the order of the data: the sample and the centres do not depend on the
    // sampler's internal order.
    let mut draw = |of: usize, count: usize| {
        let mut v = rand::seq::index::sample(&mut rng, of, count).into_vec();
        v.sort_unstable();
        v
    };
    let sample = (n > k * MAX_POINTS_PER_CENTROID)
        .then(|| {
            let rows = draw(n, k * MAX_POINTS_PER_CENTROID);
            let data = rows.iter().flat_map(|&i| x.row(i).iter().copied()).collect();
            Embeddings::new(data, rows.len(), d)
        })
        .transpose()?;
    let train = sample.as_ref().unwrap_or(x);
    let mut centres = Vec::with_capacity(k * d);
    for i in draw(train.n, k) {
        centres.extend_from_slice(train.row(i));
    }
    let mut assign = vec![u32::MAX; train.n];
    let train_norms = squared_norms(&train.data, d);
    for _ in 0..iters.max(1) {
        let new = nearest(train, &train_norms, &centres, k, device)?;
        let changed = new != assign;
        assign = new;
        if !changed {
            break;
        }
        centres = means(train, &assign, centres, k, &mut rng);
    }
    match sample {
        Some(_) => nearest(x, &squared_norms(&x.data, d), &centres, k, device),
        None => Ok(assign),
    }
}

/// Each centre moved to the mean of its points; a centre left with none takes half of another
/// cluster, as faiss's `split_clusters` does (duplicate points drawn as starts otherwise leave
/// centres empty for good).
fn means(x: &Embeddings, assign: &[u32], mut centres: Vec<f32>, k: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let d = x.dim;
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
    split_empty(&mut centres, &mut counts, d, rng);
    centres
}

/// faiss's `split_clusters`: each empty cluster copies a cluster drawn with probability
/// `(size − 1)/(n − k)` (walking the clusters in turn), both nudged apart by `1 ± 1/1024` on
/// alternate coordinates, and takes half its points.
fn split_empty(centres: &mut [f32], counts: &mut [usize], d: usize, rng: &mut ChaCha8Rng) {
    use rand::Rng;
    const EPS: f32 = 1.0 / 1024.0;
    let (n, k) = (counts.iter().sum::<usize>(), counts.len());
    if n <= k || counts.iter().all(|&c| c < 2) {
        return;
    }
    for ci in 0..k {
        if counts[ci] > 0 {
            continue;
        }
        let mut cj = 0;
        loop {
            let p = (counts[cj] as f32 - 1.0) / (n - k) as f32;
            if rng.random::<f32>() < p {
                break;
            }
            cj = (cj + 1) % k;
        }
        for j in 0..d {
            let (a, b) = if j % 2 == 0 {
                (1.0 + EPS, 1.0 - EPS)
            } else {
                (1.0 - EPS, 1.0 + EPS)
            };
            centres[ci * d + j] = centres[cj * d + j] * a;
            centres[cj * d + j] *= b;
        }
        counts[ci] = counts[cj] / 2;
        counts[cj] -= counts[ci];
    }
}

/// Normalised mutual information (arithmetic mean of the entropies, as sklearn's default).
/// Ordered maps: the sums run in one order, so a run gives the same digits every time (hash
/// maps changed the 16th digit from run to run).
pub fn nmi(clusters: &[u32], labels: &[u32]) -> f64 {
    let n = clusters.len() as f64;
    if clusters.is_empty() {
        return 0.0;
    }
    let mut joint: BTreeMap<(u32, u32), f64> = BTreeMap::new();
    let mut cu: BTreeMap<u32, f64> = BTreeMap::new();
    let mut cv: BTreeMap<u32, f64> = BTreeMap::new();
    for (&u, &v) in clusters.iter().zip(labels) {
        *joint.entry((u, v)).or_default() += 1.0;
        *cu.entry(u).or_default() += 1.0;
        *cv.entry(v).or_default() += 1.0;
    }
    let h = |m: &BTreeMap<u32, f64>| -m.values().map(|&c| (c / n) * (c / n).ln()).sum::<f64>();
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

/// π_ratio as Roth et al. define it (2020, their `metrics/dists.py`, the code MDProp's tables
/// come from): `π_intra / π_inter` with **cosine** distances `1 − cos`. π_intra is the mean over
/// classes of the mean distance between distinct items of the class; π_inter is the mean distance
/// between distinct class centroids, each centroid (the mean of its class's raw embeddings)
/// L2-normalised; the ratio's denominator is clipped at 1e-8. A class with one item has no
/// intra distance and takes the largest of the others' (the reference's evident intent: its
/// `intra_dists[1 - np.isnan(...)]` indexes with 0/1 and so takes the max over the first two
/// classes only). Lower means denser classes.
pub fn pi_ratio(x: &Embeddings, labels: &[u32], device: &Device) -> Result<f64> {
    let mut by_class: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, &l) in labels.iter().enumerate() {
        by_class.entry(l).or_default().push(i);
    }
    let mut classes: Vec<(u32, Vec<usize>)> = by_class.into_iter().collect();
    classes.sort_by_key(|c| c.0);
    let d = x.dim;
    let unit = |v: &[f32]| -> Vec<f32> {
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-12);
        v.iter().map(|a| a / n).collect()
    };
    let intra: Vec<Option<f64>> = classes
        .par_iter()
        .map(|(_, items)| {
            if items.len() < 2 {
                return None;
            }
            let rows: Vec<Vec<f32>> = items.iter().map(|&i| unit(x.row(i))).collect();
            let (mut s, mut m) = (0.0f64, 0usize);
            for a in 0..rows.len() {
                for b in a + 1..rows.len() {
                    let cos: f32 = rows[a].iter().zip(&rows[b]).map(|(p, q)| p * q).sum();
                    s += 1.0 - cos as f64;
                    m += 1;
                }
            }
            Some(s / m as f64)
        })
        .collect();
    let k = classes.len();
    let max_intra = intra.iter().flatten().copied().fold(f64::NAN, f64::max);
    anyhow::ensure!(
        k >= 2 && !max_intra.is_nan(),
        "π_ratio needs two classes and a class with two items"
    );
    let intra = intra.iter().map(|v| v.unwrap_or(max_intra)).sum::<f64>() / k as f64;
    let mut cent = Vec::with_capacity(k * d);
    for (_, items) in &classes {
        let mut c = vec![0f32; d];
        for &i in items {
            c.iter_mut()
                .zip(x.row(i))
                .for_each(|(o, &v)| *o += v / items.len() as f32);
        }
        cent.extend(unit(&c));
    }
    let cent = Embeddings::new(cent, k, d)?;
    // On unit vectors the squared Euclidean distance is 2 − 2 cos: the cosine distance is half.
    let sums = scan_rows(&cent, &cent, device, |i, row| {
        row.iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &v)| v.max(0.0) as f64 / 2.0)
            .sum::<f64>()
    })?;
    let inter = sums.iter().sum::<f64>() / (k * (k - 1)) as f64;
    Ok(intra / inter.max(1e-8))
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
                // Blobs in distinct directions (angles 0°, 45°, 63°): π_ratio is angular.
                pts.push(10.0 + (i as f32) * 0.01);
                pts.push(c as f32 * 10.0 + (i % 3) as f32 * 0.01);
                labels.push(c);
            }
        }
        let x = Embeddings::new(pts, 30, 2).unwrap();
        // faiss's start: three distinct points drawn from the seed. Lloyd from one point of
        // each blob finds the blobs; the seeds whose draw covers them must.
        let mut covered = 0;
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let picks = rand::seq::index::sample(&mut rng, 30, 3).into_vec();
            let mut blobs: Vec<u32> = picks.iter().map(|&i| labels[i]).collect();
            blobs.sort_unstable();
            blobs.dedup();
            if blobs.len() == 3 {
                covered += 1;
                let a = kmeans(&x, 3, 50, seed, &dev).unwrap();
                assert!((nmi(&a, &labels) - 1.0).abs() < 1e-9, "seed {seed}: {a:?}");
            }
        }
        assert!(covered >= 3, "{covered} of 20 draws cover the blobs");
        let p = pi_ratio(&x, &labels, &dev).unwrap();
        assert!(p > 0.0 && p < 0.01, "{p}");
    }

    /// Beyond 256 points per centroid, faiss fits on a sample: two blobs of 600 points and
    /// k = 2 fit on 512 of them, then every point is assigned.
    #[test]
    fn kmeans_fits_on_faiss_sample_and_assigns_every_point() {
        let dev = Device::default();
        let n = 1200;
        let pts: Vec<f32> = (0..n)
            .flat_map(|i| [(i / 600) as f32 * 5.0 + (i % 7) as f32 * 0.01, 1.0])
            .collect();
        let labels: Vec<u32> = (0..n).map(|i| (i / 600) as u32).collect();
        let x = Embeddings::new(pts, n, 2).unwrap();
        let mut covered = 0;
        for seed in 0..8 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut sample = rand::seq::index::sample(&mut rng, n, 512).into_vec();
            sample.sort_unstable();
            let starts = rand::seq::index::sample(&mut rng, 512, 2).into_vec();
            if labels[sample[starts[0]]] != labels[sample[starts[1]]] {
                covered += 1;
                let a = kmeans(&x, 2, 20, seed, &dev).unwrap();
                assert_eq!(a.len(), n);
                assert!((nmi(&a, &labels) - 1.0).abs() < 1e-9, "seed {seed}");
            }
        }
        assert!(covered >= 2, "{covered} of 8 draws cover the blobs");
    }

    /// Duplicate points drawn as starts: the empty centre takes half of a cluster (faiss's
    /// split) and k-means still finds both groups.
    #[test]
    fn an_empty_cluster_is_split_as_faiss_splits_it() {
        let dev = Device::default();
        // Ten copies of (1, 0.5) and ten of (3, 0.5): every start among the copies of one point
        // leaves a centre empty after the first assignment. (On the diagonal faiss's split would
        // tie: its nudges are symmetric there.)
        let pts: Vec<f32> = (0..20)
            .flat_map(|i| if i < 10 { [1.0, 0.5] } else { [3.0, 0.5] })
            .collect();
        let labels: Vec<u32> = (0..20).map(|i| u32::from(i >= 10)).collect();
        let x = Embeddings::new(pts, 20, 2).unwrap();
        for seed in 0..10 {
            let a = kmeans(&x, 2, 50, seed, &dev).unwrap();
            assert!((nmi(&a, &labels) - 1.0).abs() < 1e-9, "seed {seed}: {a:?}");
        }
        let (mut centres, mut counts) = (vec![2.0, 4.0, 0.0, 0.0], vec![6, 0]);
        split_empty(&mut centres, &mut counts, 2, &mut ChaCha8Rng::seed_from_u64(0));
        assert_eq!(counts, [3, 3]);
        let e = 1.0 / 1024.0;
        assert_eq!(
            centres,
            [2.0 * (1.0 - e), 4.0 * (1.0 + e), 2.0 * (1.0 + e), 4.0 * (1.0 - e)]
        );
    }

    #[test]
    fn pi_ratio_is_roths_cosine_definition() {
        // Class 0: (1,0), (0,1) → intra 1 − cos = 1; class 1: (2,0), (4,0) → 0; class 2: one
        // item, takes the max (1). π_intra = (1 + 0 + 1)/3 = 2/3. Unit centroids: (1,1)/√2,
        // (1,0), (−1,0): cos distances 1 − 1/√2, 1 + 1/√2, 2 → π_inter = 4/3. The Euclidean
        // definition rdml used before gives 0.42 here.
        let x = Embeddings::new(vec![1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 4.0, 0.0, -3.0, 0.0], 5, 2).unwrap();
        let p = pi_ratio(&x, &[0, 0, 1, 1, 2], &Device::default()).unwrap();
        let want = (2.0 / 3.0) / (4.0 / 3.0);
        assert!((p - want).abs() < 1e-6, "{p} vs {want}");
    }
}
