//! Embedding shift (robrank's ES attack; EST's inner maximisation): maximise ‖f(x̃) − f(x)‖,
//! i.e. minimise its negative. At the first step f(x̃) = f(x), where the norm has no gradient:
//! the clean embedding is offset by a tiny amount there, which sets the first step's direction;
//! robrank's loss also offsets it at every later step ([`Offset::robrank`]).

use super::dist_rows;
use crate::attack::objective::Objective;
use crate::loss::distance::Distance;
use burn::tensor::{Distribution, Tensor};

/// How the first step's zero gradient is broken, and what the later steps take the distance from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offset {
    /// ±1e-7 per coordinate of the clean embedding at the first step, drawn from a fixed seed (no
    /// direction preferred); the clean embedding itself at the later steps.
    Jitter,
    /// robrank's loss, [`Offset::robrank`]: `‖(f(x̃) − (f(x) + added)) + eps‖` at the first step and
    /// `‖(f(x̃) − f(x)) + eps‖` after it, summed over the rows, in that order of f32 operations.
    Robrank { added: Added, eps: f32 },
}

/// What robrank adds to the clean embedding at the first step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Added {
    /// The same value in every coordinate: its ES attack's `f(x) + 1e-7`.
    Constant(f32),
    /// `1e-7 · r`, `r ∈ {−1, 0, 1}` per coordinate: its EST training's
    /// `1e-7 * th.randint_like(f(x), -1, 2)` (`AdvRank.embShift`), a fresh draw at every call
    /// there; here from `seed`, which the caller draws afresh for each batch from its own stream.
    Ternary { seed: u64 },
}

impl Offset {
    /// robrank's ES attack (`advrank.py`): its loss is `F.pairwise_distance(f(x̃), f(x) + 1e-7)` at
    /// the first step and `F.pairwise_distance(f(x̃), f(x))` after it, and `pairwise_distance` adds
    /// its own `eps = 1e-6` to the difference at every step: every coordinate is offset by
    /// `1e-6 − 1e-7` at the first step and by `1e-6` at each later one, which moves every step's
    /// direction a little. The first step's gradient is the offset alone, so the rounding of those
    /// few operations decides the signs of its smallest components: they are done as PyTorch does
    /// them. Its cosine metric (`1 − cos(f(x̃), f(x) + 1e-7)`) has no eps: `+1e-7` at the first
    /// step, none after (on unit embeddings the Euclidean norm's gradient points the same way).
    pub fn robrank(distance: Distance) -> Self {
        Self::Robrank {
            added: Added::Constant(1e-7),
            eps: pairwise_eps(distance),
        }
    }

    /// robrank's EST training (`AdvRank.embShift`): as [`Offset::robrank`], but the first step adds
    /// `1e-7 · {−1, 0, 1}` per coordinate, drawn from `seed`; the eps (1e-6) still dominates, so
    /// every row's first step goes nearly the same way, but the draw turns a few pixels' first
    /// sign steps, and the eight steps after them part further.
    pub fn robrank_training(distance: Distance, seed: u64) -> Self {
        Self::Robrank {
            added: Added::Ternary { seed },
            eps: pairwise_eps(distance),
        }
    }
}

/// `F.pairwise_distance`'s eps, for the Euclidean metrics; robrank's cosine metric has none.
fn pairwise_eps(distance: Distance) -> f32 {
    match distance {
        Distance::Cosine => 0.0,
        Distance::Euclidean | Distance::NormalizedEuclidean => 1e-6,
    }
}

/// The jitter's seed: an attack's first step is the same at every call.
const JITTER_SEED: u64 = 0x5eed;

pub struct EmbeddingShift {
    pub clean: Tensor<2>,
    pub offset: Offset,
}

impl EmbeddingShift {
    /// rdml's embedding shift from `clean`, its first step from [`Offset::Jitter`].
    pub fn new(clean: Tensor<2>) -> Self {
        Self {
            clean,
            offset: Offset::Jitter,
        }
    }

    /// The difference `[b, d]` whose row norms are the distances the loss maximises at `step`.
    fn difference(&self, emb: Tensor<2>, step: usize) -> Tensor<2> {
        match (step, self.offset) {
            (0, Offset::Jitter) => {
                let jitter = self
                    .seeded(JITTER_SEED, Distribution::Bernoulli(0.5))
                    .mul_scalar(2e-7)
                    .sub_scalar(1e-7);
                emb - (self.clean.clone() + jitter)
            }
            (_, Offset::Jitter) => emb - self.clean.clone(),
            (0, Offset::Robrank { added, eps }) => {
                let reference = match added {
                    Added::Constant(c) => self.clean.clone().add_scalar(c),
                    Added::Ternary { seed } => {
                        let r = self
                            .seeded(seed, Distribution::Uniform(0.0, 3.0))
                            .floor()
                            .sub_scalar(1.0);
                        self.clean.clone() + r.mul_scalar(1e-7)
                    }
                };
                (emb - reference).add_scalar(eps)
            }
            (_, Offset::Robrank { eps, .. }) => (emb - self.clean.clone()).add_scalar(eps),
        }
    }

    /// One draw of `law` per coordinate, from `seed`: the offset only breaks the tie, and the
    /// same call must give the same result.
    fn seeded(&self, seed: u64, law: Distribution) -> Tensor<2> {
        crate::host_random(seed, self.clean.shape(), law, &self.clean.device())
    }
}

impl Objective for EmbeddingShift {
    fn loss(&self, emb: Tensor<2>, step: usize) -> Tensor<1> {
        let dist = self.difference(emb, step).powi_scalar(2).sum_dim(1);
        match self.offset {
            // The mean of `Distance::Euclidean.rows`, whose 1e-12 keeps the root's gradient finite.
            Offset::Jitter => dist.add_scalar(1e-12).sqrt().mean().neg(),
            // robrank's sum: its eps keeps every row off zero; without one (cosine), a row that
            // did not move (its pixels all at their bounds) would give the root a NaN gradient.
            Offset::Robrank { eps: 0.0, .. } => dist.add_scalar(1e-12).sqrt().sum().neg(),
            Offset::Robrank { .. } => dist.sqrt().sum().neg(),
        }
    }
    /// Without the offsets, which only break the zero gradient at the start (and, for robrank's,
    /// follow its loss's eps).
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        Some(dist_rows(emb, self.clean.clone()).reshape([b]).neg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    /// The difference `f(x̃) − f(x)`'s stand-in at `step` where `f(x̃) = f(x)`, on coordinates of a
    /// unit embedding's size (1/32: f32 spacing 4e-9).
    fn offset_at(offset: Offset, step: usize) -> Vec<f32> {
        let clean = Tensor::<2>::from_data(TensorData::new(vec![0.03125f32; 64], [2, 32]), &Device::default());
        let shift = EmbeddingShift {
            clean: clean.clone(),
            offset,
        };
        crate::host::read(&shift.difference(clean, step)).unwrap()
    }

    /// robrank's offset moves every coordinate the same way at every step (by its
    /// pairwise_distance's eps, less the first step's 1e-7, for its Euclidean metrics; by −1e-7 at
    /// the first step only for its cosine one); rdml's jitter moves them both ways, at the first
    /// step only.
    #[test]
    fn robranks_offset_is_one_constant_each_step_and_rdmls_a_first_jitter() {
        let close = |v: &[f32], c: f32| v.iter().all(|x| (x - c).abs() < 1e-8);
        for distance in [Distance::NormalizedEuclidean, Distance::Euclidean] {
            let robrank = Offset::robrank(distance);
            assert!(close(&offset_at(robrank, 0), 9e-7));
            assert!(close(&offset_at(robrank, 1), 1e-6));
            assert!(close(&offset_at(robrank, 7), 1e-6));
        }
        let cosine = Offset::robrank(Distance::Cosine);
        assert!(close(&offset_at(cosine, 0), -1e-7));
        assert!(offset_at(cosine, 1).iter().all(|&x| x == 0.0));
        let jitter = offset_at(Offset::Jitter, 0);
        assert!(jitter.iter().all(|x| (x.abs() - 1e-7).abs() < 1e-8), "{jitter:?}");
        assert!(
            jitter.iter().any(|&x| x > 0.0) && jitter.iter().any(|&x| x < 0.0),
            "{jitter:?}"
        );
        assert!(offset_at(Offset::Jitter, 1).iter().all(|&x| x == 0.0));
        // EST's: 1e-6 less 1e-7·{−1, 0, 1} at the first step, all three drawn; 1e-6 after.
        let training = Offset::robrank_training(Distance::NormalizedEuclidean, 7);
        let first = offset_at(training, 0);
        for want in [9e-7, 1e-6, 1.1e-6] {
            assert!(first.iter().any(|x| (x - want).abs() < 1e-8), "{want}: {first:?}");
        }
        assert!(
            first
                .iter()
                .all(|x| [9e-7, 1e-6, 1.1e-6].iter().any(|w| (x - w).abs() < 1e-8))
        );
        assert!(close(&offset_at(training, 1), 1e-6));
        // Each batch its own draw, as robrank's unseeded randint_like; a seed its own.
        assert_eq!(first, offset_at(training, 0));
        assert_ne!(
            first,
            offset_at(Offset::robrank_training(Distance::NormalizedEuclidean, 8), 0)
        );
    }

    /// robrank's cosine metric has no eps: a row that did not move still has a finite gradient.
    #[test]
    fn a_row_that_did_not_move_keeps_a_finite_gradient_without_an_eps() {
        let device = Device::default().autodiff();
        let clean = Tensor::<2>::from_data(TensorData::new(vec![0.5f32, 0.5, 0.5, 0.5], [1, 4]), &device);
        let shift = EmbeddingShift {
            clean: clean.clone().detach(),
            offset: Offset::robrank(Distance::Cosine),
        };
        let emb = clean.require_grad();
        let grads = shift.loss(emb.clone(), 3).backward();
        let g = crate::host::read(&emb.grad(&grads).unwrap().without_autodiff()).unwrap();
        assert!(g.iter().all(|v| v.is_finite()), "{g:?}");
    }
}
