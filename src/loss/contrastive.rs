//! Contrastive loss (Hadsell et al.), the positive-perturbation paper's Eq. 3 with hinges:
//! positive pairs `[d − m⁺]_+`, negative pairs `[m⁻ − d]_+`, averaged over all pairs (each mined
//! triplet gives one positive and one negative pair).

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

/// The contrastive loss's parameters (`[loss] kind = "contrastive"`) and its miner's (whose
/// semihard window is m⁻).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Contrastive {
    #[serde(default = "super::distance::normalized_euclidean")]
    pub distance: Distance,
    #[serde(
        default = "super::miner_table::robrank_default",
        deserialize_with = "super::miner_table::robrank"
    )]
    pub miner: MinerTable,
    #[serde(default)]
    pub pos_margin: f32,
    #[serde(default = "one")]
    pub neg_margin: f32,
}

fn one() -> f32 {
    1.0
}

impl Loss for Contrastive {
    fn distance(&self) -> Distance {
        self.distance
    }

    fn mining(&self) -> Option<Mining> {
        Some(self.miner.mining(self.neg_margin))
    }

    fn tuple(&self) -> Option<super::unit::TupleLoss> {
        Some(super::unit::TupleLoss::Contrastive {
            pos_margin: self.pos_margin,
            neg_margin: self.neg_margin,
        })
    }

    fn validate(&self) -> Result<()> {
        super::unit::non_negative(self.pos_margin, "pos_margin")?;
        super::unit::non_negative(self.neg_margin, "neg_margin")?;
        self.miner.validate()
    }

    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let t = batch.triplets(self, rng)?;
        Ok(LossOutput {
            loss: contrastive_loss(&batch.emb, &t, self.distance, self.pos_margin, self.neg_margin),
            triplets: Some(t),
        })
    }
}

pub fn contrastive_loss(
    emb: &Tensor<2>,
    t: &Triplets,
    distance: Distance,
    pos_margin: f32,
    neg_margin: f32,
) -> Tensor<1> {
    let [a, p, n] = t.gather(emb);
    contrastive_pairs(a.clone(), p, a, n, distance, pos_margin, neg_margin)
}

/// The mean over positive pairs `(a⁺_k, p_k)` and negative pairs `(a⁻_k, n_k)`; the anchors of the
/// two kinds of pair differ under seed 000's per-pair anchor perturbation (Appendix F).
pub fn contrastive_pairs(
    a_pos: Tensor<2>,
    p: Tensor<2>,
    a_neg: Tensor<2>,
    n: Tensor<2>,
    distance: Distance,
    pos_margin: f32,
    neg_margin: f32,
) -> Tensor<1> {
    let pos = relu(distance.rows(a_pos, p).sub_scalar(pos_margin));
    let neg = relu(distance.rows(a_neg, n).neg().add_scalar(neg_margin));
    Tensor::cat(vec![pos, neg], 0).mean()
}
