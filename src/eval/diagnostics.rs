//! Collapse diagnostics logged per epoch: the mean pairwise distance d̄, the separability
//! `(d(a,n) − d(a,p))/d̄`, the mean hardness `H = d(a,p) − d(a,n)`, CA-TRIDE's collapseness
//! (its Eq. 5–6: attention-weighted mean d(a,p) minus that of d(a,n), closer pairs weighted more),
//! the fraction of triplets the perturbation made hard (zero loss before, positive after) and the
//! mean hardness after the perturbation (HM: how close it came to its destination hardness).

use crate::loss::distance::Distance;
use crate::loss::miner::Triplets;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// CA-TRIDE's attention temperature for collapseness (its CUB value).
pub const COLLAPSENESS_LAMBDA: f32 = 10.0;

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

/// `d_ω` of CA-TRIDE's Eq. 6: the attention-weighted mean `Σ w d / Σ w`, `w = exp(−λ(d − min d))`
/// (closer pairs weigh more). `lambda < 0` gives the reference code's `exp(|λ|(d − max d))`. The
/// weights carry gradient, as in Eq. 6–7 and the reference code (CA-TRIDE's adversary
/// differentiates it); only the shift by the extreme (which cancels in the ratio) is held
/// constant, for numerical range.
pub fn weighted_mean(d: Tensor<1>, lambda: f32) -> Tensor<1> {
    let w = d.clone().mul_scalar(-lambda);
    let w = (w.clone() - w.detach().max()).exp();
    (w.clone() * d).sum() / w.sum()
}

/// Collapseness `C = d_ω(A, P) − d_ω(A, N)` (CA-TRIDE's Eq. 5) of per-triplet distances.
pub fn collapseness(dap: Tensor<1>, dan: Tensor<1>, lambda: f32) -> Tensor<1> {
    weighted_mean(dap, lambda) - weighted_mean(dan, lambda)
}

/// Triplets for the diagnostics of losses that mine none: each anchor pair of the batch (SPC-2
/// pairs, else a random positive) with a random negative, drawn from the diagnostics' own seeded
/// generator so that logging leaves the training stream unchanged.
pub fn spc2_random_triplets(labels: &[u32]) -> Triplets {
    use rand::{Rng, SeedableRng};
    let rng = &mut rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let pairs = crate::loss::miner::anchor_pairs(labels, crate::loss::miner::Anchors::Pairs, rng);
    let (mut anchor, mut positive, mut negative) = (vec![], vec![], vec![]);
    for (a, p) in pairs {
        let negs: Vec<usize> = (0..labels.len()).filter(|&j| labels[j] != labels[a]).collect();
        if negs.is_empty() {
            continue;
        }
        anchor.push(a);
        positive.push(p);
        negative.push(negs[rng.random_range(0..negs.len())]);
    }
    Triplets {
        anchor,
        positive: positive.into(),
        negative: negative.into(),
    }
}

/// A batch's diagnostics computed on the device (the six numbers of [`BatchDiagnostics`] in its
/// field order, `[6]`), read back with the rest of the epoch's by [`Accumulator::flush`]: a
/// training step does not wait for them.
#[derive(Clone)]
pub struct DeviceDiagnostics {
    values: Tensor<1>,
    perturbed: bool,
}

impl DeviceDiagnostics {
    /// The numbers, read back (one read).
    pub fn read(&self) -> anyhow::Result<BatchDiagnostics> {
        Ok(self.with_row(&crate::host::read1(&self.values)?))
    }

    fn with_row(&self, v: &[f32]) -> BatchDiagnostics {
        let v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        BatchDiagnostics {
            mean_distance: v[0],
            separability: v[1],
            hardness: v[2],
            collapseness: v[3],
            made_hard: self.perturbed.then_some(v[4]),
            adversarial_hardness: self.perturbed.then_some(v[5]),
        }
    }
}

/// Per-triplet `d(a,p)` and `d(a,n)` `[k]` of embeddings `e` (rows indexed by `t`).
fn pair_distances(e: &Tensor<2>, t: &Triplets, d: Distance) -> (Tensor<1>, Tensor<1>) {
    let [a, p, n] = t.gather(e);
    (d.rows(a.clone(), p), d.rows(a, n))
}

/// The diagnostics of clean embeddings `e` `[n, dim]` (detached) on triplets `t`, on the device;
/// `adv` are the perturbed embeddings with the triplets that index them and the loss margin.
pub fn batch_on_device(
    e: &Tensor<2>,
    t: &Triplets,
    d: Distance,
    adv: Option<(&Tensor<2>, &Triplets, f32)>,
) -> DeviceDiagnostics {
    let e = e.clone().detach().without_autodiff();
    let device = e.device();
    let n = e.dims()[0];
    let zero = || Tensor::<1>::zeros([1], &device);
    let pairs = (n * n.saturating_sub(1)).max(1) as f64;
    let mean_distance = d.matrix(e.clone()).sum().div_scalar(pairs);
    let (hardness, collapseness, gap) = if t.is_empty() {
        (zero(), zero(), None)
    } else {
        let (ap, an) = pair_distances(&e, t, d);
        let c = collapseness(ap.clone(), an.clone(), COLLAPSENESS_LAMBDA);
        let gap = ap - an;
        (gap.clone().mean(), c, Some(gap))
    };
    let separability = hardness.clone().neg() / mean_distance.clone().clamp_min(1e-12);
    let (made_hard, adversarial_hardness) = match (adv, gap) {
        (Some((ae, at, margin)), Some(gap)) => {
            let ae = ae.clone().detach().without_autodiff();
            let (aap, aan) = pair_distances(&ae, at, d);
            let adv_gap = aap - aan;
            let was_easy = gap.add_scalar(margin).lower_equal_elem(0.0);
            let now_hard = adv_gap.clone().add_scalar(margin).greater_elem(0.0);
            (was_easy.bool_and(now_hard).float().mean(), adv_gap.mean())
        }
        _ => (zero(), zero()),
    };
    let values = Tensor::cat(
        vec![
            mean_distance,
            separability,
            hardness,
            collapseness,
            made_hard,
            adversarial_hardness,
        ],
        0,
    );
    DeviceDiagnostics {
        values,
        perturbed: adv.is_some(),
    }
}

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
    /// Batches whose diagnostics are still on the device, with the margin to judge them by.
    pending: Vec<(DeviceDiagnostics, Option<f64>)>,
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
    /// Adds a batch whose diagnostics are still on the device (read by [`Self::flush`]).
    pub fn add_device(&mut self, b: DeviceDiagnostics, margin: Option<f64>) {
        self.pending.push((b, margin));
    }

    /// Reads the pending batches back, all in one read, and adds them.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let rows = Tensor::stack::<2>(pending.iter().map(|(b, _)| b.values.clone()).collect(), 0);
        let host = crate::host::read(&rows)?;
        for ((b, margin), v) in pending.iter().zip(host.chunks(6)) {
            self.add(&b.with_row(v), *margin);
        }
        Ok(())
    }

    /// The epoch's means (of the batches added or flushed).
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

    /// The diagnostics of 2-d points `e` on the triplet (0, 1, 2); `adv`: the perturbed
    /// triplet's three points, with the margin.
    fn device_batch(e: &[f32], adv: Option<([f32; 6], f32)>) -> DeviceDiagnostics {
        let dev = burn::tensor::Device::default();
        let rows =
            |v: &[f32]| Tensor::<2>::from_data(burn::tensor::TensorData::new(v.to_vec(), [v.len() / 2, 2]), &dev);
        let t = Triplets {
            anchor: vec![0],
            positive: vec![1].into(),
            negative: vec![2].into(),
        };
        let adv = adv.map(|(a, m)| (rows(&a), m));
        batch_on_device(
            &rows(e),
            &t,
            Distance::Euclidean,
            adv.as_ref().map(|(a, m)| (a, &t, *m)),
        )
    }

    fn batch(e: &[f32], adv: Option<([f32; 6], f32)>) -> BatchDiagnostics {
        device_batch(e, adv).read().unwrap()
    }

    #[test]
    fn hand_values() {
        // a = (1,0), p = (0,1), n = (−1,0): d(a,p) = √2, d(a,n) = 2, d(p,n) = √2.
        let e = [1.0, 0.0, 0.0, 1.0, -1.0, 0.0];
        // d(ã, p̃) = 2, d(ã, ñ) = 1 after the perturbation (and the reverse below).
        let (hard, easy) = ([0.0, 0.0, 2.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0, 2.0, 0.0]);
        let b = batch(&e, Some((hard, 0.2)));
        let r2 = 2f64.sqrt();
        assert!((b.mean_distance - (2.0 * r2 + 2.0) / 3.0).abs() < 2e-6);
        assert!((b.hardness - (r2 - 2.0)).abs() < 1e-6);
        assert!((b.separability - (2.0 - r2) / b.mean_distance).abs() < 1e-6);
        assert!((b.collapseness - (r2 - 2.0)).abs() < 1e-6);
        assert_eq!(b.made_hard, Some(1.0));
        assert!((b.adversarial_hardness.unwrap() - 1.0).abs() < 1e-6);
        let mut acc = Accumulator::new();
        acc.add(&b, Some(0.2));
        assert!(!acc.finish().unwrap().collapsed);
        // Batches without a perturbation leave the perturbation means alone; others average.
        // Batches still on the device join the ones already read at the flush.
        let dev = |adv| {
            let b = batch(&e, adv);
            assert_eq!(b.made_hard.is_some(), adv.is_some());
            b
        };
        acc.add(&dev(None), Some(0.2));
        acc.add(&dev(Some((easy, 0.2))), Some(0.2));
        let f = acc.finish().unwrap();
        // The same three batches left on the device: one read at the flush, the same means.
        let mut pending = Accumulator::new();
        for adv in [Some((hard, 0.2)), None, Some((easy, 0.2))] {
            pending.add_device(device_batch(&e, adv), Some(0.2));
        }
        assert_eq!(pending.finish(), None);
        let r0 = crate::host::reads();
        pending.flush().unwrap();
        assert_eq!(crate::host::reads() - r0, 1);
        assert_eq!(pending.finish().unwrap(), f);
        assert_eq!(f.made_hard, Some(0.5));
        assert!((f.adversarial_hardness.unwrap() - 0.0).abs() < 1e-6);
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
