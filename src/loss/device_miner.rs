//! The miners of [`super::miner`] on the device: the same definitions (semihard window,
//! softhard, distance-weighted, hardest), chosen from the distance matrix where it was computed,
//! so that a GPU step does not wait to read the embeddings back.
//!
//! The random choices differ in how they are drawn, not in what they are: the host miners draw
//! an index among the candidates they counted, which needs the count on the host; here every
//! (anchor, item) pair gets a uniform key drawn from the same seeded stream before the distances
//! are known, and each anchor takes the candidate of largest key (uniform among its candidates),
//! or of largest `log w + Gumbel(key)` for distance-weighted sampling (exactly `∝ w`). The
//! hardest negative has no draw and is the host's. A seed gives the same triplets on every
//! device that mines on the device; the CPU keeps the host miners and robrank's draws, so its
//! runs stay bit-identical to earlier versions.

use super::distance::Distance;
use super::miner::{self, Miner, Mining, Rows, Triplets};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::cell::Cell;

thread_local! {
    static ON_DEVICE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Makes this thread's miners run on the device (`Some(true)`), on the host (`Some(false)`) or
/// by device (`None`: on the device everywhere but the CPU), e.g. to test on the CPU what a GPU
/// runs.
pub fn set_mine_on_device(on: Option<bool>) {
    ON_DEVICE.with(|c| c.set(on));
}

/// Whether a miner that needs distances runs on the device for embeddings on `device`.
pub fn mines_on_device(device: &Device) -> bool {
    ON_DEVICE
        .with(Cell::get)
        .unwrap_or_else(|| device.clone().without_autodiff() != crate::default_device())
}

/// The batch's triplets under `mining`, mined on the device from the detached embeddings `emb`
/// `[n, dim]`; anchor pairs are drawn as the host miners draw them. Reads nothing back. (Random
/// negatives need no distances: the library's callers draw them on the host, the same on every
/// device; here they are uniform keys like the rest.)
pub fn mine(mining: &Mining, distance: Distance, emb: &Tensor<2>, labels: &[u32], rng: &mut ChaCha8Rng) -> Triplets {
    let pairs = miner::anchor_pairs(labels, mining.anchors, rng);
    mine_pairs(mining, distance, emb, labels, &pairs, rng)
}

/// [`mine`] on given anchor pairs (HM mines its source and destination on the same ones).
pub fn mine_pairs(
    mining: &Mining,
    distance: Distance,
    emb: &Tensor<2>,
    labels: &[u32],
    pairs: &[(usize, usize)],
    rng: &mut ChaCha8Rng,
) -> Triplets {
    let Some(c) = Candidates::new(distance, emb, labels, pairs) else {
        return Triplets::default();
    };
    let (positive, negative) = match mining.miner {
        Miner::Random => (c.p0.clone(), c.uniform(c.negs.clone(), rng)),
        Miner::Semihard => (c.p0.clone(), c.semihard(mining.margin, rng)),
        Miner::Softhard => c.softhard(rng),
        Miner::Distance => (c.p0.clone(), c.distance_weighted(emb.dims()[1], mining, rng)),
        Miner::Hardest => (c.p0.clone(), c.hardest()),
    };
    Triplets {
        anchor: c.anchor,
        positive: Rows::device(positive),
        negative: Rows::device(negative),
    }
}

/// One batch's anchors (those with a negative) and what their miners choose among: the
/// distances `d` `[m, n]` from each anchor to every item, the masks of its negatives and of its
/// other positives, and its drawn positive.
struct Candidates {
    anchor: Vec<usize>,
    p0: Tensor<1, Int>,
    d: Tensor<2>,
    negs: Tensor<2, Bool>,
    poss: Tensor<2, Bool>,
}

impl Candidates {
    fn new(distance: Distance, emb: &Tensor<2>, labels: &[u32], pairs: &[(usize, usize)]) -> Option<Self> {
        let n = labels.len();
        // The host miners skip an anchor with no negative, without a draw.
        let pairs: Vec<(usize, usize)> = pairs
            .iter()
            .copied()
            .filter(|&(a, _)| labels.iter().any(|&l| l != labels[a]))
            .collect();
        if pairs.is_empty() {
            return None;
        }
        let (m, device) = (pairs.len(), emb.device());
        let anchor: Vec<usize> = pairs.iter().map(|p| p.0).collect();
        let p0: Vec<usize> = pairs.iter().map(|p| p.1).collect();
        let mask = |keep: &dyn Fn(usize, usize) -> bool| {
            let v: Vec<bool> = anchor.iter().flat_map(|&a| (0..n).map(move |j| keep(a, j))).collect();
            Tensor::<2, Bool>::from_data(TensorData::new(v, [m, n]), &device)
        };
        Some(Self {
            d: anchor_distances(distance, emb, &anchor, &device),
            p0: crate::host::index_tensor(&p0, &device),
            negs: mask(&|a, j| labels[j] != labels[a]),
            poss: mask(&|a, j| labels[j] == labels[a] && j != a),
            anchor,
        })
    }

    /// One uniform key in (0, 1) per (anchor, item), never 0 or 1 (Gumbel noise takes
    /// `log(−log u)`).
    fn keys(&self, rng: &mut ChaCha8Rng) -> Tensor<2> {
        let [m, n] = self.d.dims();
        let v: Vec<f32> = (0..m * n)
            .map(|_| ((rng.random::<u32>() >> 8) as f32 + 0.5) / (1u32 << 24) as f32)
            .collect();
        Tensor::<2>::from_data(TensorData::new(v, [m, n]), &self.d.device())
    }

    /// A uniform choice among `first`, or among the negatives where `first` is empty.
    fn uniform(&self, first: Tensor<2, Bool>, rng: &mut ChaCha8Rng) -> Tensor<1, Int> {
        let key = self.keys(rng);
        choose(first, key.clone(), self.negs.clone(), key)
    }

    /// A negative with `d(a,p) < d(a,n) < d(a,p) + margin`.
    fn semihard(&self, margin: f32, rng: &mut ChaCha8Rng) -> Tensor<1, Int> {
        let dims = self.d.dims();
        let dap = self.d.clone().gather(1, self.p0.clone().unsqueeze_dim(1)).expand(dims);
        let window = (self.d.clone().greater(dap.clone())).bool_and(self.d.clone().lower(dap.add_scalar(margin)));
        self.uniform(self.negs.clone().bool_and(window), rng)
    }

    /// A positive farther than the closest negative (else any item of the anchor's class, itself
    /// included, as the host miner) and a negative closer than the farthest positive.
    fn softhard(&self, rng: &mut ChaCha8Rng) -> (Tensor<1, Int>, Tensor<1, Int>) {
        let (dims, d) = (self.d.dims(), &self.d);
        let max_pos = d
            .clone()
            .mask_fill(self.poss.clone().bool_not(), f32::NEG_INFINITY)
            .max_dim(1);
        let min_neg = d
            .clone()
            .mask_fill(self.negs.clone().bool_not(), f32::INFINITY)
            .min_dim(1);
        let hard_pos = self.poss.clone().bool_and(d.clone().greater(min_neg.expand(dims)));
        let any_hard = hard_pos.clone().any_dim(1).reshape([dims[0]]);
        let key = self.keys(rng);
        // The anchor's class, itself included: its other positives and its own slot.
        let own: Vec<bool> = self
            .anchor
            .iter()
            .flat_map(|&a| (0..dims[1]).map(move |j| j == a))
            .collect();
        let own = Tensor::<2, Bool>::from_data(TensorData::new(own, dims), &d.device());
        let class = self.poss.clone().bool_or(own);
        let any_of_class = argmax(key.clone().mask_fill(class.bool_not(), f32::NEG_INFINITY));
        let p =
            argmax(key.mask_fill(hard_pos.bool_not(), f32::NEG_INFINITY)).mask_where(any_hard.bool_not(), any_of_class);
        let n = self.uniform(self.negs.clone().bool_and(d.clone().lower(max_pos.expand(dims))), rng);
        (p, n)
    }

    /// Wu et al.'s `q(d)⁻¹ ∝ d^{2−D} (1 − d²/4)^{(3−D)/2}` by the Gumbel-max trick; negatives at
    /// or past the nonzero-loss cutoff get weight 0, and all negatives are equal when every one
    /// has.
    fn distance_weighted(&self, dim: usize, mining: &Mining, rng: &mut ChaCha8Rng) -> Tensor<1, Int> {
        let (dim, d) = (dim as f32, &self.d);
        let x = d.clone().clamp(mining.cutoff.max(1e-4), 2.0 - 1e-4);
        let logw = x.clone().log().mul_scalar(2.0 - dim)
            - (x.powi_scalar(2).div_scalar(-4.0).add_scalar(1.0))
                .log()
                .mul_scalar((dim - 3.0) / 2.0);
        let first = match mining.nonzero_loss_cutoff {
            Some(c) => self.negs.clone().bool_and(d.clone().lower_elem(c)),
            None => self.negs.clone(),
        };
        let key = self.keys(rng);
        let gumbel = key.clone().log().neg().log().neg();
        choose(first, logw + gumbel, self.negs.clone(), key)
    }

    /// The nearest negative.
    fn hardest(&self) -> Tensor<1, Int> {
        argmax(
            self.d
                .clone()
                .neg()
                .mask_fill(self.negs.clone().bool_not(), f32::NEG_INFINITY),
        )
    }
}

/// Distances from each anchor to every item `[m, n]`, as the host miners see them: Euclidean
/// distances under 1e-5 (the root's 1e-12 guard) count as 0.
fn anchor_distances(distance: Distance, emb: &Tensor<2>, anchor: &[usize], device: &Device) -> Tensor<2> {
    let e = emb.clone().detach().without_autodiff();
    let a = crate::host::gather(&e, &crate::host::index_tensor(anchor, device));
    let e_sq = e.clone().powi_scalar(2).sum_dim(1).transpose();
    let d = distance.cross(a, &e, &e_sq);
    match distance {
        Distance::Cosine => d,
        _ => d.clone().mask_fill(d.lower_elem(1e-5), 0.0),
    }
}

/// Per row, the item of largest `score` among `first`, or of largest `fallback_score` among
/// `fallback` where `first` is empty.
fn choose(
    first: Tensor<2, Bool>,
    score: Tensor<2>,
    fallback: Tensor<2, Bool>,
    fallback_score: Tensor<2>,
) -> Tensor<1, Int> {
    let [m, n] = first.dims();
    let has = first.clone().any_dim(1).expand([m, n]);
    let mask = first.bool_or(fallback.bool_and(has.clone().bool_not()));
    let s = fallback_score.mask_where(has, score);
    argmax(s.mask_fill(mask.bool_not(), f32::NEG_INFINITY))
}

/// Column of each row's maximum `[m]`.
fn argmax(x: Tensor<2>) -> Tensor<1, Int> {
    let m = x.dims()[0];
    x.argmax(1).reshape([m])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// 1-D embeddings `points` `[n, 1]` with their labels.
    fn setup(points: &[f32], labels: &[u32]) -> (Tensor<2>, Vec<u32>) {
        let e = Tensor::<2>::from_data(
            TensorData::new(points.to_vec(), [points.len(), 1]),
            &crate::default_device(),
        );
        (e, labels.to_vec())
    }

    fn mining(miner: Miner) -> Mining {
        Mining {
            miner,
            margin: 0.2,
            ..Mining::default()
        }
    }

    fn host(r: &Rows) -> Vec<usize> {
        r.host().unwrap().into_owned()
    }

    #[test]
    fn device_miners_pick_by_definition_and_read_nothing() {
        let (e, labels) = setup(&[0.0, 1.0, 0.5, 1.1, 1.3, 3.0], &[0, 0, 1, 2, 3, 4]);
        let rng = &mut ChaCha8Rng::seed_from_u64(0);
        let d = Distance::Euclidean;
        let r0 = crate::host::reads();
        let h = mine(&mining(Miner::Hardest), d, &e, &labels, rng);
        let picks: Vec<Triplets> = (0..20)
            .flat_map(|_| [Miner::Semihard, Miner::Softhard].map(|m| mine(&mining(m), d, &e, &labels, rng)))
            .collect();
        assert_eq!(crate::host::reads(), r0, "mining read from the device");
        // Not SPC-2, so both class-0 items are anchors; the second (at 1.0) is nearest to 1.1.
        assert_eq!(h.anchor, [0, 1]);
        assert_eq!((host(&h.positive), host(&h.negative)), (vec![1, 0], vec![2, 3]));
        for pair in picks.chunks(2) {
            // Semihard window (1.0, 1.2) of anchor 0: only the negative at 1.1.
            assert_eq!(host(&pair[0].negative)[0], 3);
            // Softhard: negatives closer than the farthest positive (1.0): only 0.5.
            let (p, n) = (host(&pair[1].positive), host(&pair[1].negative));
            assert_eq!((p[0], n[0]), (1, 2));
        }
    }

    /// As the host miner: without a positive farther than the closest negative, any item of the
    /// anchor's class, itself included (anchor 0's class is 0, 1 and 2 here; anchors 1 and 2 too).
    #[test]
    fn device_softhard_without_a_hard_positive_draws_any_of_the_class_itself_included() {
        let (e, labels) = setup(&[0.0, 0.2, 0.1, 1.0, 2.0], &[0, 0, 0, 1, 2]);
        let rng = &mut ChaCha8Rng::seed_from_u64(3);
        let mut count = [0usize; 5];
        for _ in 0..1500 {
            let t = mine(&mining(Miner::Softhard), Distance::Euclidean, &e, &labels, rng);
            assert_eq!(t.anchor[0], 0);
            count[host(&t.positive)[0]] += 1;
        }
        assert!(
            count[..3].iter().all(|&c| (c as f64 / 1500.0 - 1.0 / 3.0).abs() < 0.05),
            "{count:?}"
        );
    }

    /// Frequencies of each negative over `draws` minings of anchor 0.
    fn frequencies(miner: Mining, points: &[f32], labels: &[u32], draws: usize) -> Vec<f64> {
        let (e, labels) = setup(points, labels);
        let rng = &mut ChaCha8Rng::seed_from_u64(7);
        let mut count = vec![0usize; points.len()];
        for _ in 0..draws {
            let t = mine(&miner, Distance::Euclidean, &e, &labels, rng);
            count[host(&t.negative)[0]] += 1;
        }
        count.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    #[test]
    fn random_choices_are_uniform_among_the_candidates_or_all_negatives() {
        // Window (1.0, 1.5): the negatives at 1.1, 1.2 and 1.4, each a third of the time.
        let semihard = Mining {
            margin: 0.5,
            ..mining(Miner::Semihard)
        };
        let f = frequencies(semihard, &[0.0, 1.0, 1.1, 1.2, 1.4, 3.0], &[0, 0, 1, 2, 3, 4], 1500);
        for (j, want) in [(2, 1.0 / 3.0), (3, 1.0 / 3.0), (4, 1.0 / 3.0), (5, 0.0)] {
            assert!((f[j] - want).abs() < 0.05, "negative {j}: {f:?}");
        }
        // An empty window: any negative, a quarter each.
        let f = frequencies(semihard, &[0.0, 1.0, 0.1, 0.2, 2.0, 3.0], &[0, 0, 1, 2, 3, 4], 1500);
        assert!(f[2..].iter().all(|&p| (p - 0.25).abs() < 0.05), "{f:?}");
    }

    #[test]
    fn distance_weighted_draws_follow_the_weights() {
        // D = 1: w(x) = x (1 − x²/4) for the negatives at 0.3, 0.8 and 1.5 from the anchor.
        let points = [0.0, 0.2, 0.3, 0.8, 1.5];
        let labels = [0, 0, 1, 2, 3];
        let w = |x: f64| x * (1.0 - x * x / 4.0);
        let want = |xs: &[f64]| {
            let t: f64 = xs.iter().map(|&x| w(x)).sum();
            xs.iter().map(|&x| w(x) / t).collect::<Vec<_>>()
        };
        let f = frequencies(mining(Miner::Distance), &points, &labels, 2000);
        for (got, want) in f[2..].iter().zip(want(&[0.3, 0.8, 1.5])) {
            assert!((got - want).abs() < 0.04, "{f:?}");
        }
        // Negatives at or past the cutoff 1.0 get weight 0.
        let cut = Mining {
            nonzero_loss_cutoff: Some(1.0),
            ..mining(Miner::Distance)
        };
        let f = frequencies(cut, &points, &labels, 2000);
        assert_eq!(f[4], 0.0);
        for (got, want) in f[2..4].iter().zip(want(&[0.3, 0.8])) {
            assert!((got - want).abs() < 0.04, "{f:?}");
        }
    }

    #[test]
    fn the_hardest_negative_is_the_host_miners() {
        let rng = &mut ChaCha8Rng::seed_from_u64(3);
        let labels: Vec<u32> = (0..24).map(|i| i / 2).collect();
        let v: Vec<f32> = (0..24 * 8).map(|_| rng.random::<f32>() - 0.5).collect();
        let e = Tensor::<2>::from_data(TensorData::new(v.clone(), [24, 8]), &crate::default_device());
        let m = mining(Miner::Hardest);
        let dev = mine(&m, Distance::Euclidean, &e, &labels, rng);
        let on_host = super::super::mine(&m, Distance::Euclidean, &v, 8, &labels, rng).unwrap();
        assert_eq!(dev.anchor, on_host.anchor);
        assert_eq!(host(&dev.negative), host(&on_host.negative));
    }
}
