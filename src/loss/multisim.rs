//! Multi-similarity loss (Wang et al. 2019) on cosine similarities of normalised embeddings.
//! Pair mining: a positive (i,j) is kept if `S_ij − ε < max_k S_ik` over negatives, a negative
//! (i,k) if `S_ik + ε > min_j S_ij` over positives. Loss per anchor:
//! `1/α log(1 + Σ_P e^{−α(S_ij − λ)}) + 1/β log(1 + Σ_N e^{β(S_ik − λ)})`, averaged over anchors.

use super::distance::Distance;
use super::unit::{Batch, Loss, LossOutput};
use anyhow::{Result, ensure};
use burn::tensor::{Tensor, TensorData};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Multi-similarity's parameters (`[loss] kind = "multi-similarity"`; Wang et al.'s α, β, λ, ε).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MultiSimilarity {
    #[serde(default = "alpha")]
    pub alpha: f32,
    #[serde(default = "beta")]
    pub beta: f32,
    #[serde(default = "base")]
    pub base: f32,
    #[serde(default = "epsilon")]
    pub epsilon: f32,
}

fn alpha() -> f32 {
    2.0
}
fn beta() -> f32 {
    40.0
}
fn base() -> f32 {
    0.5
}
fn epsilon() -> f32 {
    0.1
}

impl Loss for MultiSimilarity {
    fn distance(&self) -> Distance {
        Distance::Cosine
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            self.alpha > 0.0 && self.beta > 0.0,
            "loss.alpha and loss.beta must be > 0"
        );
        Ok(())
    }

    fn compute(&self, batch: &Batch, _rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let s = batch.emb.clone().matmul(batch.emb.clone().transpose());
        let (pm, nm) = ms_masks(&crate::host::read(&s)?, batch.labels, self.epsilon);
        Ok(LossOutput {
            loss: multisim_loss(s, pm, nm, self.alpha, self.beta, self.base),
            triplets: None,
        })
    }
}

/// Host-side pair mining; returns (positive mask, negative mask), row-major `n × n`.
pub fn ms_masks(sim: &[f32], labels: &[u32], epsilon: f32) -> (Vec<f32>, Vec<f32>) {
    let n = labels.len();
    let (mut pm, mut nm) = (vec![0f32; n * n], vec![0f32; n * n]);
    for i in 0..n {
        let pos: Vec<usize> = (0..n).filter(|&j| j != i && labels[j] == labels[i]).collect();
        let neg: Vec<usize> = (0..n).filter(|&j| labels[j] != labels[i]).collect();
        if pos.is_empty() || neg.is_empty() {
            continue;
        }
        let max_neg = neg.iter().map(|&k| sim[i * n + k]).fold(f32::MIN, f32::max);
        let min_pos = pos.iter().map(|&j| sim[i * n + j]).fold(f32::MAX, f32::min);
        for &j in &pos {
            if sim[i * n + j] - epsilon < max_neg {
                pm[i * n + j] = 1.0;
            }
        }
        for &k in &neg {
            if sim[i * n + k] + epsilon > min_pos {
                nm[i * n + k] = 1.0;
            }
        }
    }
    (pm, nm)
}

/// The loss given similarity matrix `sim` `[n, n]` and the masks.
pub fn multisim_loss(
    sim: Tensor<2>,
    pos_mask: Vec<f32>,
    neg_mask: Vec<f32>,
    alpha: f32,
    beta: f32,
    base: f32,
) -> Tensor<1> {
    let device = sim.device();
    let [n, _] = sim.dims();
    let pm = Tensor::<2>::from_data(TensorData::new(pos_mask, [n, n]), &device);
    let nm = Tensor::<2>::from_data(TensorData::new(neg_mask, [n, n]), &device);
    let pos = (sim.clone().sub_scalar(base).mul_scalar(-alpha).exp() * pm)
        .sum_dim(1)
        .log1p()
        .div_scalar(alpha);
    let neg = (sim.sub_scalar(base).mul_scalar(beta).exp() * nm)
        .sum_dim(1)
        .log1p()
        .div_scalar(beta);
    (pos + neg).mean()
}
