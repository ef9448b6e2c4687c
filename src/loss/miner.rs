//! Miners: choose (anchor, positive, negative) index triplets from a batch's distance matrix.
//! They return indices only; losses score them. Definitions follow robrank's `losses/miner.py`.

use rand::Rng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub use super::rows::Rows;
use burn::tensor::{Device, Int, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Miner {
    /// A uniformly random negative.
    Random,
    /// A random negative with `d(a,p) < d(a,n) < d(a,p) + margin`; any negative if none.
    Semihard,
    /// A random negative closer than the farthest positive, and a positive resampled among those
    /// farther than the closest negative; when none is, among every item of the anchor's class,
    /// the anchor itself included (robrank's `spc2-softhard`: a second copy of the anchor image
    /// then stands as its positive).
    Softhard,
    /// Wu et al.'s distance-weighted sampling, `q(d)⁻¹ ∝ d^{2−D} (1 − d²/4)^{(3−D)/2}`.
    Distance,
    /// The nearest negative.
    Hardest,
}

/// Which batch items act as anchors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Anchors {
    /// robrank's SPC-2 convention: the first item of each class group of two is the anchor and
    /// the second its positive (for larger groups, every item with a random positive).
    #[default]
    Pairs,
    /// Every item is an anchor, with a random other item of its class as positive.
    All,
}

/// Mined (anchor, positive, negative) rows of a batch. Anchors follow from the labels alone and
/// stay on the host; positives and negatives are where their miner chose them.
#[derive(Debug, Clone, Default)]
pub struct Triplets {
    pub anchor: Vec<usize>,
    pub positive: Rows,
    pub negative: Rows,
}

impl Triplets {
    pub fn len(&self) -> usize {
        self.anchor.len()
    }
    pub fn is_empty(&self) -> bool {
        self.anchor.is_empty()
    }

    /// The three index tensors on `device`.
    pub fn tensors(&self, device: &Device) -> [Tensor<1, Int>; 3] {
        [
            crate::host::index_tensor(&self.anchor, device),
            self.positive.tensor(device),
            self.negative.tensor(device),
        ]
    }

    /// The anchor, positive and negative rows `[T, d]` of the embeddings `emb`, gathered where
    /// `emb` is.
    pub fn gather(&self, emb: &Tensor<2>) -> [Tensor<2>; 3] {
        self.tensors(&emb.device()).map(|i| crate::host::gather(emb, &i))
    }

    /// The anchors as [`Rows`] (to stack with the positives and negatives).
    pub fn anchor_rows(&self) -> Rows {
        Rows::Host(self.anchor.clone())
    }
}

/// A tuple loss's mining settings (`miner`, `anchors`, `cutoff`, `nonzero_loss_cutoff` of its
/// `[loss]` table, and the margin of its semihard window), read by [`crate::loss::mine`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mining {
    pub miner: Miner,
    pub anchors: Anchors,
    /// The semihard window (the triplet and margin losses' margin, the contrastive loss's m⁻).
    pub margin: f32,
    pub cutoff: f32,
    pub nonzero_loss_cutoff: Option<f32>,
}

impl Mining {
    /// The miners' options for embeddings of width `dim`.
    pub fn options(&self, dim: usize) -> MineOptions {
        MineOptions {
            margin: self.margin,
            dim,
            cutoff: self.cutoff,
            nonzero_loss_cutoff: self.nonzero_loss_cutoff,
        }
    }
}

impl Default for Mining {
    /// Random negatives on SPC-2 pairs: what the losses without a miner of their own get.
    fn default() -> Self {
        Self {
            miner: Miner::Random,
            anchors: Anchors::Pairs,
            margin: 0.2,
            cutoff: 0.0,
            nonzero_loss_cutoff: None,
        }
    }
}

/// Options shared by the miners.
#[derive(Debug, Clone, Copy)]
pub struct MineOptions {
    /// The semihard window.
    pub margin: f32,
    /// Embedding dimension D (distance-weighted sampling).
    pub dim: usize,
    /// Distances below this are raised to it before weighting (Wu et al.: 0.5; robrank: none).
    pub cutoff: f32,
    /// Negatives at or beyond this distance get weight 0 (Wu et al.: 1.4; robrank: none).
    pub nonzero_loss_cutoff: Option<f32>,
}

/// Whether a batch is laid out as SPC-2's same-class pairs (rows 2i and 2i + 1 of one class).
pub fn is_spc2(labels: &[u32]) -> bool {
    let n = labels.len();
    n.is_multiple_of(2) && (0..n).step_by(2).all(|i| labels[i] == labels[i + 1])
}

/// (anchor, positive) pairs of a batch laid out in class groups.
pub fn anchor_pairs(labels: &[u32], mode: Anchors, rng: &mut ChaCha8Rng) -> Vec<(usize, usize)> {
    let n = labels.len();
    let spc2 = is_spc2(labels);
    let random_positive = |a: usize, rng: &mut ChaCha8Rng| {
        let same: Vec<usize> = (0..n).filter(|&j| j != a && labels[j] == labels[a]).collect();
        same.choose(rng).copied()
    };
    match mode {
        Anchors::Pairs if spc2 => (0..n).step_by(2).map(|i| (i, i + 1)).collect(),
        _ => (0..n).filter_map(|a| random_positive(a, rng).map(|p| (a, p))).collect(),
    }
}

/// Mines one negative (and, for softhard, possibly a new positive) per anchor pair.
/// `dist` is the `n × n` distance matrix of the batch.
pub fn mine(
    miner: Miner,
    dist: &[f32],
    labels: &[u32],
    pairs: &[(usize, usize)],
    opt: &MineOptions,
    rng: &mut ChaCha8Rng,
) -> Triplets {
    let n = labels.len();
    let d = |i: usize, j: usize| dist[i * n + j];
    let (mut anchor, mut positive, mut negative) = (vec![], vec![], vec![]);
    for &(a, p0) in pairs {
        let negs: Vec<usize> = (0..n).filter(|&j| labels[j] != labels[a]).collect();
        if negs.is_empty() {
            continue;
        }
        let mut p = p0;
        let random = |rng: &mut ChaCha8Rng| negs[rng.random_range(0..negs.len())];
        let neg = match miner {
            Miner::Random => random(rng),
            Miner::Semihard => {
                let dap = d(a, p);
                let ok: Vec<usize> = negs
                    .iter()
                    .copied()
                    .filter(|&j| dap < d(a, j) && d(a, j) < dap + opt.margin)
                    .collect();
                ok.choose(rng).copied().unwrap_or_else(|| random(rng))
            }
            Miner::Softhard => {
                let poss: Vec<usize> = (0..n).filter(|&j| j != a && labels[j] == labels[a]).collect();
                let max_pos = poss.iter().map(|&j| d(a, j)).fold(f32::MIN, f32::max);
                let min_neg = negs.iter().map(|&j| d(a, j)).fold(f32::MAX, f32::min);
                let hard_pos: Vec<usize> = poss.iter().copied().filter(|&j| d(a, j) > min_neg).collect();
                p = match hard_pos.choose(rng) {
                    Some(&q) => q,
                    // robrank's `__miner_spc2_softhard`: any item of the anchor's class, itself included.
                    None => {
                        let class: Vec<usize> = (0..n).filter(|&j| labels[j] == labels[a]).collect();
                        class.choose(rng).copied().unwrap_or(p0)
                    }
                };
                let ok: Vec<usize> = negs.iter().copied().filter(|&j| d(a, j) < max_pos).collect();
                ok.choose(rng).copied().unwrap_or_else(|| random(rng))
            }
            Miner::Distance => {
                let dim = opt.dim as f32;
                let logw: Vec<f32> = negs
                    .iter()
                    .map(|&j| {
                        let x = d(a, j).clamp(opt.cutoff.max(1e-4), 2.0 - 1e-4);
                        (2.0 - dim) * x.ln() - ((dim - 3.0) / 2.0) * (1.0 - x * x / 4.0).ln()
                    })
                    .collect();
                let mx = logw.iter().copied().fold(f32::MIN, f32::max);
                let w: Vec<f64> = negs
                    .iter()
                    .zip(&logw)
                    .map(|(&j, &l)| match opt.nonzero_loss_cutoff {
                        Some(c) if d(a, j) >= c => 0.0,
                        _ => ((l - mx) as f64).exp(),
                    })
                    .collect();
                let total: f64 = w.iter().sum();
                if total > 0.0 && total.is_finite() {
                    let mut u = rng.random::<f64>() * total;
                    let mut pick = negs[negs.len() - 1];
                    for (&j, &wj) in negs.iter().zip(&w) {
                        u -= wj;
                        if u <= 0.0 && wj > 0.0 {
                            pick = j;
                            break;
                        }
                    }
                    pick
                } else {
                    random(rng)
                }
            }
            Miner::Hardest => *negs
                .iter()
                .min_by(|&&x, &&y| d(a, x).total_cmp(&d(a, y)))
                .expect("non-empty"),
        };
        anchor.push(a);
        positive.push(p);
        negative.push(neg);
    }
    Triplets {
        anchor,
        positive: positive.into(),
        negative: negative.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Margin 0.2 in two dimensions, no cutoffs.
    fn options() -> MineOptions {
        MineOptions {
            margin: 0.2,
            dim: 2,
            cutoff: 0.0,
            nonzero_loss_cutoff: None,
        }
    }

    fn setup() -> (Vec<f32>, Vec<u32>) {
        // 1-D points: a=0 (class 0), p=1 (class 0), negatives at 0.5, 1.1, 1.3, 3.0 (class 1..).
        let pts = [0.0f32, 1.0, 0.5, 1.1, 1.3, 3.0];
        let labels = vec![0, 0, 1, 2, 3, 4];
        let n = pts.len();
        let mut d = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                d[i * n + j] = (pts[i] - pts[j]).abs();
            }
        }
        (d, labels)
    }

    #[test]
    fn miners_pick_by_definition() {
        let (d, labels) = setup();
        let opt = options();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let pairs = [(0, 1)];
        let h = mine(Miner::Hardest, &d, &labels, &pairs, &opt, &mut rng);
        assert_eq!(*h.negative.host().unwrap(), [2]);
        for _ in 0..20 {
            // Semihard window (1.0, 1.2): only the negative at 1.1.
            let s = mine(Miner::Semihard, &d, &labels, &pairs, &opt, &mut rng);
            assert_eq!(*s.negative.host().unwrap(), [3]);
            // Softhard: negatives closer than the farthest positive (1.0): only 0.5.
            let s = mine(Miner::Softhard, &d, &labels, &pairs, &opt, &mut rng);
            assert_eq!((s.positive.host().unwrap()[0], s.negative.host().unwrap()[0]), (1, 2));
        }
    }

    /// robrank's softhard fallback: no positive farther than the closest negative, so any item of
    /// the anchor's class, the anchor itself included, a third of the time each.
    #[test]
    fn softhard_without_a_hard_positive_draws_any_of_the_class_itself_included() {
        let pts = [0.0f32, 0.2, 0.1, 1.0, 2.0];
        let labels = [0, 0, 0, 1, 2];
        let d: Vec<f32> = pts
            .iter()
            .flat_map(|a| pts.iter().map(move |b| (a - b).abs()))
            .collect();
        let opt = options();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut count = [0usize; 3];
        for _ in 0..1500 {
            let t = mine(Miner::Softhard, &d, &labels, &[(0, 1)], &opt, &mut rng);
            count[t.positive.host().unwrap()[0]] += 1;
        }
        assert!(
            count.iter().all(|&c| (c as f64 / 1500.0 - 1.0 / 3.0).abs() < 0.05),
            "{count:?}"
        );
    }

    #[test]
    fn spc2_anchor_pairs() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(
            anchor_pairs(&[3, 3, 1, 1], Anchors::Pairs, &mut rng),
            vec![(0, 1), (2, 3)]
        );
        let all = anchor_pairs(&[3, 3, 1, 1], Anchors::All, &mut rng);
        assert_eq!(all, vec![(0, 1), (1, 0), (2, 3), (3, 2)]);
    }
}
