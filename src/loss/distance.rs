//! Distances between embeddings, on the host (for miners, attack selections and scores) and on
//! tensors (for losses and attack objectives): one type for the whole library.
//! robrank's suffixes: `N` = Euclidean on L2-normalised embeddings, `E` = Euclidean on raw
//! embeddings, `C` = cosine distance `1 − cos` on normalised embeddings.

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    NormalizedEuclidean,
    Euclidean,
    Cosine,
}

/// The distance the triplet and contrastive losses default to.
pub(crate) fn normalized_euclidean() -> Distance {
    Distance::NormalizedEuclidean
}

impl Distance {
    /// Whether the distance assumes unit-norm embeddings.
    pub fn needs_normalized(self) -> bool {
        !matches!(self, Distance::Euclidean)
    }

    /// Distance between two host vectors.
    pub fn host(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Distance::NormalizedEuclidean | Distance::Euclidean => lane_sum(a, b, |x, y| (x - y) * (x - y)).sqrt(),
            Distance::Cosine => 1.0 - lane_sum(a, b, |x, y| x * y),
        }
    }

    /// The `n × n` distance matrix of host embeddings (row-major), by one matrix multiply on the
    /// default device (a scalar loop costs tens of milliseconds per training batch). Euclidean
    /// entries come from `‖a‖² + ‖b‖² − 2a·b`; the diagonal is 0.
    pub fn host_matrix(self, e: &[f32], n: usize, dim: usize) -> anyhow::Result<Vec<f32>> {
        use burn::tensor::TensorData;
        let t = Tensor::<2>::from_data(TensorData::new(e.to_vec(), [n, dim]), &crate::default_device());
        let mut m = crate::host::read(&self.matrix(t))?;
        for i in 0..n {
            m[i * n + i] = 0.0;
        }
        if self != Distance::Cosine {
            // `matrix` adds 1e-12 under the root for finite gradients; the host copy drops it.
            m.iter_mut().for_each(|v| {
                if *v < 1e-5 {
                    *v = 0.0
                }
            });
        }
        Ok(m)
    }

    /// Row-wise distance of two `[t, d]` tensors → `[t]`. The Euclidean form adds 1e-12 under the
    /// root so that the gradient stays finite when two embeddings coincide.
    pub fn rows(self, a: Tensor<2>, b: Tensor<2>) -> Tensor<1> {
        match self {
            Distance::NormalizedEuclidean | Distance::Euclidean => (a - b)
                .powi_scalar(2)
                .sum_dim(1)
                .add_scalar(1e-12)
                .sqrt()
                .squeeze_dim(1),
            Distance::Cosine => (a * b).sum_dim(1).squeeze_dim(1).neg().add_scalar(1.0),
        }
    }

    /// Row-wise distance as robrank's defenses take it → `[t]`: PyTorch's `F.pairwise_distance`,
    /// whose `eps = 1e-6` is added to the difference (`‖a − b + 1e-6‖`), for the Euclidean forms;
    /// `1 − cos` for cosine, as robrank's metric C. The eps moves each PGD step's gradient by a
    /// hair, enough to turn the sign of a pixel's step where its gradient is near zero: the
    /// defenses' inner objectives take it so, to step as robrank's code steps.
    pub fn pairwise(self, a: Tensor<2>, b: Tensor<2>) -> Tensor<1> {
        match self {
            Distance::NormalizedEuclidean | Distance::Euclidean => {
                (a - b).add_scalar(1e-6).powi_scalar(2).sum_dim(1).sqrt().squeeze_dim(1)
            }
            Distance::Cosine => self.rows(a, b),
        }
    }

    /// Distances of every row of `e` `[b, d]` to every row of `x` `[n, d]` → `[b, n]`, with
    /// `x_sq` the squared norms of `x` as `[1, n]` (precomputed: `x` is a fixed candidate set).
    pub fn cross(self, e: Tensor<2>, x: &Tensor<2>, x_sq: &Tensor<2>) -> Tensor<2> {
        match self {
            Distance::NormalizedEuclidean | Distance::Euclidean => {
                let e_sq = e.clone().powi_scalar(2).sum_dim(1);
                let dots = e.matmul(x.clone().transpose());
                (e_sq + x_sq.clone() - dots.mul_scalar(2.0))
                    .clamp_min(0.0)
                    .add_scalar(1e-12)
                    .sqrt()
            }
            Distance::Cosine => e.matmul(x.clone().transpose()).neg().add_scalar(1.0),
        }
    }

    /// All pairwise distances of a `[n, d]` tensor → `[n, n]`.
    pub fn matrix(self, e: Tensor<2>) -> Tensor<2> {
        let dots = e.clone().matmul(e.clone().transpose());
        match self {
            Distance::NormalizedEuclidean | Distance::Euclidean => {
                let sq = e.powi_scalar(2).sum_dim(1);
                let d2 = sq.clone() + sq.transpose() - dots.mul_scalar(2.0);
                d2.clamp_min(0.0).add_scalar(1e-12).sqrt()
            }
            Distance::Cosine => dots.neg().add_scalar(1.0),
        }
    }
}

/// `Σ_i f(a_i, b_i)` over 16 running sums: one running sum is a chain the compiler may not
/// reorder, 16 of them vectorise (the attack suite scores every query against all candidates
/// this way).
fn lane_sum(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| f(x, y)).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += f(x[k], y[k]);
        }
    }
    acc.iter().sum::<f32>() + tail
}
