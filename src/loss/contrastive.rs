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
    let pos = relu(distance.rows(a.clone(), p).sub_scalar(pos_margin));
    let neg = relu(distance.rows(a, n).neg().add_scalar(neg_margin));
    Tensor::cat(vec![pos, neg], 0).mean()
}
