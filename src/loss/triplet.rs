//! Triplet loss (Schroff et al.), the positive-perturbation paper's Eq. 4:
//! `ℓ = [d(a,p) − d(a,n) + α]_+`, averaged over the mined triplets (PyTorch's
//! `triplet_margin_loss` reduction, as robrank uses).

use super::distance::Distance;
use super::miner::Mining;
use super::miner::Triplets;
use super::miner_table::MinerTable;
use super::unit::{Batch, Loss, LossOutput};
use anyhow::Result;
use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The triplet loss's parameters (`[loss] kind = "triplet"`) and its miner's.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Triplet {
    #[serde(default = "super::distance::normalized_euclidean")]
    pub distance: Distance,
    #[serde(
        default = "super::miner_table::robrank_default",
        deserialize_with = "super::miner_table::robrank"
    )]
    pub miner: MinerTable,
    #[serde(default = "margin")]
    pub margin: f32,
}

fn margin() -> f32 {
    0.2
}

impl Loss for Triplet {
    fn distance(&self) -> Distance {
        self.distance
    }

    fn mining(&self) -> Option<Mining> {
        Some(self.miner.mining(self.margin))
    }

    fn tuple(&self) -> Option<super::unit::TupleLoss> {
        Some(super::unit::TupleLoss::Triplet { margin: self.margin })
    }

    fn validate(&self) -> Result<()> {
        super::unit::non_negative(self.margin, "margin")?;
        self.miner.validate()
    }

    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let t = batch.triplets(self, rng)?;
        Ok(LossOutput {
            loss: triplet_loss(&batch.emb, &t, self.distance, self.margin),
            triplets: Some(t),
        })
    }
}

/// Per-triplet losses `[t]` and the distances `(d(a,p), d(a,n))`.
pub fn triplet_terms(
    emb: &Tensor<2>,
    t: &Triplets,
    distance: Distance,
    margin: f32,
) -> (Tensor<1>, Tensor<1>, Tensor<1>) {
    let [a, p, n] = t.gather(emb);
    let dap = distance.rows(a.clone(), p);
    let dan = distance.rows(a, n);
    (relu(dap.clone() - dan.clone() + margin), dap, dan)
}

/// Mean triplet loss over `t`.
pub fn triplet_loss(emb: &Tensor<2>, t: &Triplets, distance: Distance, margin: f32) -> Tensor<1> {
    triplet_terms(emb, t, distance, margin).0.mean()
}
