//! Margin loss (Wu et al., "Sampling matters"): `[α + y_ij (d_ij − β)]_+` with a learnable
//! boundary β, over the positive and (distance-weighted) negative pairs of the mined triplets,
//! summed and divided by the number of non-zero terms; `ν·β` is added as in the paper.

use super::distance::Distance;
use super::miner::Mining;
use super::miner::Triplets;
use super::miner_table::MinerTable;
use super::unit::{Batch, Loss, LossOutput};
use anyhow::{Result, ensure};
use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The margin loss's parameters (`[loss] kind = "margin"`; Wu et al.'s defaults) and its
/// miner's.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Margin {
    #[serde(
        default = "super::miner_table::wu_default",
        deserialize_with = "super::miner_table::wu"
    )]
    pub miner: MinerTable,
    #[serde(default = "alpha")]
    pub margin: f32,
    /// The initial boundary β (trained with the model).
    #[serde(default = "beta")]
    pub beta: f32,
    /// β's learning rate.
    #[serde(default = "beta_lr")]
    pub beta_lr: f64,
    #[serde(default)]
    pub nu: f32,
}

fn alpha() -> f32 {
    0.2
}
fn beta() -> f32 {
    0.6
}
fn beta_lr() -> f64 {
    5e-4
}

impl Loss for Margin {
    fn distance(&self) -> Distance {
        Distance::NormalizedEuclidean
    }

    fn mining(&self) -> Option<Mining> {
        Some(self.miner.mining(self.margin))
    }

    fn validate(&self) -> Result<()> {
        super::unit::non_negative(self.margin, "margin")?;
        ensure!(self.beta_lr >= 0.0, "loss.beta_lr must be ≥ 0");
        self.miner.validate()
    }

    fn trainable_beta(&self) -> Option<(f32, f64)> {
        Some((self.beta, self.beta_lr))
    }

    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let t = batch.triplets(self, rng)?;
        let b = match &batch.params.beta {
            Some(p) => p.val(),
            None => Tensor::<1>::from_floats([self.beta], &batch.emb.device()),
        };
        Ok(LossOutput {
            loss: margin_loss(&batch.emb, &t, self.distance(), self.margin, b, self.nu),
            triplets: Some(t),
        })
    }
}

pub fn margin_loss(
    emb: &Tensor<2>,
    t: &Triplets,
    distance: Distance,
    alpha: f32,
    beta: Tensor<1>,
    nu: f32,
) -> Tensor<1> {
    let [a, p, n] = t.gather(emb);
    let dap = distance.rows(a.clone(), p);
    let dan = distance.rows(a, n);
    let pos = relu(dap.sub(beta.clone()).add_scalar(alpha));
    let neg = relu(beta.clone().sub(dan).add_scalar(alpha));
    let all = Tensor::cat(vec![pos, neg], 0);
    let nonzero = all.clone().greater_elem(0.0).float().sum().clamp_min(1.0);
    all.sum().div(nonzero).add(beta.mul_scalar(nu))
}
