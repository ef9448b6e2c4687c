//! N-pair loss (Sohn 2016): for anchors a_i and their positives p_i, softmax cross-entropy of
//! `a_i · p_j` over j with target i, plus `λ (‖a‖² + ‖p‖²)/2` averaged. Positives of another pair
//! with the anchor's class are masked out (robrank's SPC-2 batches can repeat a class).

use super::distance::Distance;
use super::miner::{self, Anchors};
use super::unit::{Batch, Loss, LossOutput};
use crate::host::{gather, index_tensor};
use anyhow::Result;
use burn::tensor::{Tensor, TensorData};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The N-pair loss's parameters (`[loss] kind = "npair"`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Npair {
    #[serde(default = "l2_reg")]
    pub l2_reg: f32,
}

fn l2_reg() -> f32 {
    5e-3
}

impl Loss for Npair {
    fn distance(&self) -> Distance {
        Distance::Cosine
    }

    /// Inner products with an L2 penalty: no normalisation needed.
    fn needs_normalized(&self) -> bool {
        false
    }

    fn validate(&self) -> Result<()> {
        super::unit::non_negative(self.l2_reg, "l2_reg")
    }

    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let pairs = miner::anchor_pairs(batch.labels, Anchors::Pairs, rng);
        Ok(LossOutput {
            loss: npair_loss(&batch.emb, &pairs, batch.labels, self.l2_reg),
            triplets: None,
        })
    }
}

pub fn npair_loss(emb: &Tensor<2>, pairs: &[(usize, usize)], labels: &[u32], l2_reg: f32) -> Tensor<1> {
    let device = emb.device();
    let ai: Vec<usize> = pairs.iter().map(|p| p.0).collect();
    let pi: Vec<usize> = pairs.iter().map(|p| p.1).collect();
    let a = gather(emb, &index_tensor(&ai, &device));
    let p = gather(emb, &index_tensor(&pi, &device));
    let t = pairs.len();
    let mut mask = vec![0f32; t * t];
    for i in 0..t {
        for j in 0..t {
            if i != j && labels[ai[i]] == labels[pi[j]] {
                mask[i * t + j] = -1e9;
            }
        }
    }
    let logits =
        a.clone().matmul(p.clone().transpose()) + Tensor::<2>::from_data(TensorData::new(mask, [t, t]), &device);
    let lse = {
        let m = logits.clone().max_dim(1).detach();
        (logits.clone() - m.clone()).exp().sum_dim(1).log() + m
    };
    let eye = Tensor::<2>::eye(t, &device);
    let diag = (logits * eye).sum_dim(1);
    let ce = (lse - diag).mean();
    let reg = (a.powi_scalar(2).sum_dim(1) + p.powi_scalar(2).sum_dim(1))
        .mean()
        .mul_scalar(l2_reg / 2.0);
    ce + reg
}
