//! Collapse diagnostics logged per epoch: the mean pairwise distance d̄, the separability
//! `(d(a,n) − d(a,p))/d̄`, the mean hardness `H = d(a,p) − d(a,n)`, CA-TRIDE's collapseness
//! (its Eq. 5–6: attention-weighted mean d(a,p) minus that of d(a,n), closer pairs weighted more),
//! the fraction of triplets the perturbation made hard (zero loss before, positive after) and the
//! mean hardness after the perturbation (HM: how close it came to its destination hardness).

use crate::loss::distance::Distance;
use crate::loss::miner::Triplets;
use serde::{Deserialize, Serialize};

/// CA-TRIDE's attention temperature for collapseness (its CUB value).
pub const COLLAPSENESS_LAMBDA: f64 = 10.0;

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct BatchDiagnostics {
    pub mean_distance: f64,
    pub separability: f64,
    pub hardness: f64,
    pub collapseness: f64,
    /// Only for defenses that perturb triplets.
    pub made_hard: Option<f64>,
    /// Mean `H̃ = d(ã,p̃) − d(ã,ñ)` of the perturbed triplets (defenses that perturb triplets).
    pub adversarial_hardness: Option<f64>,
}

/// Attention-weighted mean `Σ w d / Σ w`, `w = exp(−λ(d − min d))` (CA-TRIDE's Eq. 6: closer
/// pairs weigh more).
pub fn attention_mean(d: &[f64], lambda: f64) -> f64 {
    let mn = d.iter().copied().fold(f64::MAX, f64::min);
    let (mut num, mut den) = (0.0, 0.0);
    for &x in d {
        let w = (-lambda * (x - mn)).exp();
        num += w * x;
        den += w;
    }
    if den > 0.0 { num / den } else { 0.0 }
}

/// Triplets for the diagnostics of losses that mine none: each anchor pair of the batch (SPC-2
/// pairs, else a random positive) with a random negative, drawn from the diagnostics' own seeded
/// generator so that logging leaves the training stream unchanged.
pub fn spc2_random_triplets(labels: &[u32]) -> Triplets {
    use rand::{Rng, SeedableRng};
    let rng = &mut rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let pairs = crate::loss::miner::anchor_pairs(labels, crate::loss::miner::Anchors::Pairs, rng);
    let mut t = Triplets::default();
    for (a, p) in pairs {
        let negs: Vec<usize> = (0..labels.len()).filter(|&j| labels[j] != labels[a]).collect();
        if negs.is_empty() {
            continue;
        }
        t.anchor.push(a);
        t.positive.push(p);
        t.negative.push(negs[rng.random_range(0..negs.len())]);
    }
    t
}

/// Per-triplet `(d(a,p), d(a,n))` of host embeddings.
pub fn triplet_distances(e: &[f32], dim: usize, t: &Triplets, d: Distance) -> Vec<(f64, f64)> {
    let row = |i: usize| &e[i * dim..(i + 1) * dim];
    (0..t.len())
        .map(|k| {
            let a = row(t.anchor[k]);
            (
                d.host(a, row(t.positive[k])) as f64,
                d.host(a, row(t.negative[k])) as f64,
            )
        })
        .collect()
}

/// Diagnostics of clean host embeddings `e` `[n, dim]` on triplets `t`; `adv` are the
/// `(d(ã,p̃), d(ã,ñ))` of the same triplets after perturbation, with the loss margin.
pub fn batch(
    e: &[f32],
    dim: usize,
    t: &Triplets,
    d: Distance,
    adv: Option<(&[(f64, f64)], f32)>,
) -> anyhow::Result<BatchDiagnostics> {
    let n = e.len() / dim.max(1);
    let dm = d.host_matrix(e, n, dim)?;
    let pairs = (n * n.saturating_sub(1)).max(1) as f64;
    let mean_distance = dm.iter().map(|&x| x as f64).sum::<f64>() / pairs;
    let clean = triplet_distances(e, dim, t, d);
    let k = clean.len().max(1) as f64;
    let hardness = clean.iter().map(|(p, n)| p - n).sum::<f64>() / k;
    let separability = -hardness / mean_distance.max(1e-12);
    let ap: Vec<f64> = clean.iter().map(|x| x.0).collect();
    let an: Vec<f64> = clean.iter().map(|x| x.1).collect();
    let collapseness = attention_mean(&ap, COLLAPSENESS_LAMBDA) - attention_mean(&an, COLLAPSENESS_LAMBDA);
    // Both perturbation figures come from the same perturbed triplets: both or neither.
    let (made_hard, adversarial_hardness) = adv
        .map(|(a, m)| {
            let m = m as f64;
            let hit = clean
                .iter()
                .zip(a)
                .filter(|((cp, cn), (ap, an))| cp - cn + m <= 0.0 && ap - an + m > 0.0)
                .count();
            (hit as f64 / k, a.iter().map(|(p, n)| p - n).sum::<f64>() / k)
        })
        .unzip();
    Ok(BatchDiagnostics {
        mean_distance,
        separability,
        hardness,
        collapseness,
        made_hard,
        adversarial_hardness,
    })
}

/// Per-epoch means of the batch diagnostics and the collapse verdict.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EpochDiagnostics {
    pub mean_distance: f64,
    pub separability: f64,
    pub hardness: f64,
    pub collapseness: f64,
    pub made_hard: Option<f64>,
    pub adversarial_hardness: Option<f64>,
    /// Separability ≤ 0 in every batch of the epoch, or a NaN anywhere: the training batches'
    /// own sign of collapse. The run's verdict rests on the test embeddings instead
    /// (`eval::health`), which also see a collapse within the first epoch.
    pub collapsed: bool,
    /// The mean pairwise distance below the triplet loss's margin in every batch: no triplet
    /// can meet the margin, so the loss sits at it. A collapse, or a margin larger than the
    /// distances can reach (a margin of 10⁶ on the unit sphere); informative, not a verdict.
    #[serde(default)]
    pub below_margin: bool,
}

#[derive(Default)]
pub struct Accumulator {
    sum: BatchDiagnostics,
    made_hard: f64,
    adversarial_hardness: f64,
    /// Batches with a perturbation (both perturbation sums count over these).
    perturbed_n: usize,
    n: usize,
    all_inseparable: bool,
    all_below_margin: bool,
    nan: bool,
}

impl Accumulator {
    pub fn new() -> Self {
        Self {
            all_inseparable: true,
            all_below_margin: true,
            ..Default::default()
        }
    }
    /// Adds one batch; `margin` is the triplet loss's margin (`None` for other losses).
    pub fn add(&mut self, b: &BatchDiagnostics, margin: Option<f64>) {
        let vals = [b.mean_distance, b.separability, b.hardness, b.collapseness];
        self.nan |= vals.iter().any(|v| v.is_nan());
        self.all_inseparable &= b.separability <= 0.0;
        self.all_below_margin &= margin.is_some_and(|m| b.mean_distance < m);
        self.sum.mean_distance += b.mean_distance;
        self.sum.separability += b.separability;
        self.sum.hardness += b.hardness;
        self.sum.collapseness += b.collapseness;
        // Set together by `batch`.
        if let (Some(m), Some(h)) = (b.made_hard, b.adversarial_hardness) {
            self.made_hard += m;
            self.adversarial_hardness += h;
            self.perturbed_n += 1;
        }
        self.n += 1;
    }
    pub fn finish(&self) -> Option<EpochDiagnostics> {
        if self.n == 0 {
            return None;
        }
        let k = self.n as f64;
        let p = self.perturbed_n as f64;
        let (made_hard, adversarial_hardness) = (self.perturbed_n > 0)
            .then(|| (self.made_hard / p, self.adversarial_hardness / p))
            .unzip();
        Some(EpochDiagnostics {
            mean_distance: self.sum.mean_distance / k,
            separability: self.sum.separability / k,
            hardness: self.sum.hardness / k,
            collapseness: self.sum.collapseness / k,
            made_hard,
            adversarial_hardness,
            collapsed: self.nan || self.all_inseparable,
            below_margin: self.all_below_margin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_values() {
        // a = (1,0), p = (0,1), n = (−1,0): d(a,p) = √2, d(a,n) = 2, d(p,n) = √2.
        let e = [1.0, 0.0, 0.0, 1.0, -1.0, 0.0];
        let t = Triplets {
            anchor: vec![0],
            positive: vec![1],
            negative: vec![2],
        };
        let b = batch(&e, 2, &t, Distance::Euclidean, Some((&[(2.0, 1.0)], 0.2))).unwrap();
        let r2 = 2f64.sqrt();
        assert!((b.mean_distance - (2.0 * r2 + 2.0) / 3.0).abs() < 1e-6);
        assert!((b.hardness - (r2 - 2.0)).abs() < 1e-6);
        assert!((b.separability - (2.0 - r2) / b.mean_distance).abs() < 1e-6);
        assert!((b.collapseness - (r2 - 2.0)).abs() < 1e-6);
        assert_eq!(b.made_hard, Some(1.0));
        assert!((b.adversarial_hardness.unwrap() - 1.0).abs() < 1e-12);
        let mut acc = Accumulator::new();
        acc.add(&b, Some(0.2));
        assert!(!acc.finish().unwrap().collapsed);
        // Batches without a perturbation leave the perturbation means alone; others average.
        acc.add(&batch(&e, 2, &t, Distance::Euclidean, None).unwrap(), Some(0.2));
        acc.add(
            &batch(&e, 2, &t, Distance::Euclidean, Some((&[(1.0, 2.0)], 0.2))).unwrap(),
            Some(0.2),
        );
        let f = acc.finish().unwrap();
        assert_eq!(f.made_hard, Some(0.5));
        assert!((f.adversarial_hardness.unwrap() - 0.0).abs() < 1e-12);
        assert!((f.hardness - (r2 - 2.0)).abs() < 1e-6);
        acc.add(
            &BatchDiagnostics {
                separability: f64::NAN,
                ..b
            },
            Some(0.2),
        );
        assert!(acc.finish().unwrap().collapsed);
        // Separable, but every batch's mean distance (≈ 1.61 here) below the margin: below the
        // margin, not collapsed (a margin of 10⁶ must not read as a collapse); one batch above
        // it, or a loss without a margin: not below.
        let mut acc = Accumulator::new();
        acc.add(&b, Some(2.0));
        acc.add(&b, Some(2.0));
        let f = acc.finish().unwrap();
        assert!(f.below_margin && !f.collapsed);
        acc.add(&b, Some(1.0));
        assert!(!acc.finish().unwrap().below_margin);
        let mut acc = Accumulator::new();
        acc.add(&b, None);
        assert!(!acc.finish().unwrap().below_margin);
    }
}
