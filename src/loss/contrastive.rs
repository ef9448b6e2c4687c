//! Contrastive loss (Hadsell et al.), the positive-perturbation paper's Eq. 3 with hinges:
//! positive pairs `[d − m⁺]_+`, negative pairs `[m⁻ − d]_+`, averaged over all pairs (each mined
//! triplet gives one positive and one negative pair).

use super::distance::Distance;
use super::miner::Triplets;
use crate::host::{gather, index_tensor};
use burn::tensor::Tensor;
use burn::tensor::activation::relu;

pub fn contrastive_loss(
    emb: &Tensor<2>,
    t: &Triplets,
    distance: Distance,
    pos_margin: f32,
    neg_margin: f32,
) -> Tensor<1> {
    let device = emb.device();
    let a = gather(emb, &index_tensor(&t.anchor, &device));
    let p = gather(emb, &index_tensor(&t.positive, &device));
    let n = gather(emb, &index_tensor(&t.negative, &device));
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
