//! Margin loss (Wu et al., "Sampling matters"): `[α + y_ij (d_ij − β)]_+` with a learnable
//! boundary β, over the positive and (distance-weighted) negative pairs of the mined triplets,
//! summed and divided by the number of non-zero terms; `ν·β` is added as in the paper.

use super::distance::Distance;
use super::miner::Triplets;
use crate::host::{gather, index_tensor};
use burn::tensor::Tensor;
use burn::tensor::activation::relu;

pub fn margin_loss(
    emb: &Tensor<2>,
    t: &Triplets,
    distance: Distance,
    alpha: f32,
    beta: Tensor<1>,
    nu: f32,
) -> Tensor<1> {
    let device = emb.device();
    let a = gather(emb, &index_tensor(&t.anchor, &device));
    let p = gather(emb, &index_tensor(&t.positive, &device));
    let n = gather(emb, &index_tensor(&t.negative, &device));
    let dap = distance.rows(a.clone(), p);
    let dan = distance.rows(a, n);
    let pos = relu(dap.sub(beta.clone()).add_scalar(alpha));
    let neg = relu(beta.clone().sub(dan).add_scalar(alpha));
    let all = Tensor::cat(vec![pos, neg], 0);
    let nonzero = all.clone().greater_elem(0.0).float().sum().clamp_min(1.0);
    all.sum().div(nonzero).add(beta.mul_scalar(nu))
}
