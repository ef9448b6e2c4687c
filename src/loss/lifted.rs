//! Lifted structured loss (Song et al. 2016, their Eq. 4): for each positive pair (i,j),
//! `J_ij = log(Σ_{k∈N_i} e^{α − D_ik} + Σ_{l∈N_j} e^{α − D_jl}) + D_ij`, and
//! `L = 1/(2|P|) Σ_{(i,j)∈P} [J_ij]_+²`, over all positive pairs of the batch.

use super::distance::Distance;
use super::unit::{Batch, Loss, LossOutput};
use anyhow::Result;
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, TensorData};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The lifted structured loss's parameters (`[loss] kind = "lifted"`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Lifted {
    #[serde(default = "margin")]
    pub margin: f32,
}

fn margin() -> f32 {
    1.0
}

impl Loss for Lifted {
    fn distance(&self) -> Distance {
        Distance::NormalizedEuclidean
    }

    /// Defined on raw Euclidean distances: no normalisation needed.
    fn needs_normalized(&self) -> bool {
        false
    }

    fn validate(&self) -> Result<()> {
        super::unit::non_negative(self.margin, "margin")
    }

    fn compute(&self, batch: &Batch, _rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        Ok(LossOutput {
            loss: lifted_loss(Distance::Euclidean.matrix(batch.emb.clone()), batch.labels, self.margin),
            triplets: None,
        })
    }
}

/// `dist` is the `[n, n]` distance matrix; `labels` the batch labels.
pub fn lifted_loss(dist: Tensor<2>, labels: &[u32], margin: f32) -> Tensor<1> {
    let device = dist.device();
    let n = labels.len();
    let mut pm = vec![0f32; n * n];
    let mut nm = vec![0f32; n * n];
    let mut pairs = 0usize;
    for i in 0..n {
        for j in 0..n {
            if labels[i] == labels[j] {
                if i < j {
                    pm[i * n + j] = 1.0;
                    pairs += 1;
                }
            } else {
                nm[i * n + j] = 1.0;
            }
        }
    }
    let pm = Tensor::<2>::from_data(TensorData::new(pm, [n, n]), &device);
    let nm = Tensor::<2>::from_data(TensorData::new(nm, [n, n]), &device);
    let neg_sum = (dist.clone().neg().add_scalar(margin).exp() * nm).sum_dim(1); // [n, 1]
    let j = (neg_sum.clone() + neg_sum.transpose()).clamp_min(1e-30).log() + dist;
    (relu(j).powi_scalar(2) * pm)
        .sum()
        .div_scalar(2.0 * pairs.max(1) as f32)
}
