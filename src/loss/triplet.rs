//! Triplet loss (Schroff et al.), the positive-perturbation paper's Eq. 4:
//! `ℓ = [d(a,p) − d(a,n) + α]_+`, averaged over the mined triplets (PyTorch's
//! `triplet_margin_loss` reduction, as robrank uses).

use super::distance::Distance;
use super::miner::Triplets;
use crate::host::{gather, index_tensor};
use burn::tensor::Tensor;
use burn::tensor::activation::relu;

/// Per-triplet losses `[t]` and the distances `(d(a,p), d(a,n))`.
pub fn triplet_terms(
    emb: &Tensor<2>,
    t: &Triplets,
    distance: Distance,
    margin: f32,
) -> (Tensor<1>, Tensor<1>, Tensor<1>) {
    let device = emb.device();
    let a = gather(emb, &index_tensor(&t.anchor, &device));
    let p = gather(emb, &index_tensor(&t.positive, &device));
    let n = gather(emb, &index_tensor(&t.negative, &device));
    let dap = distance.rows(a.clone(), p);
    let dan = distance.rows(a, n);
    (relu(dap.clone() - dan.clone() + margin), dap, dan)
}

/// Mean triplet loss over `t`.
pub fn triplet_loss(emb: &Tensor<2>, t: &Triplets, distance: Distance, margin: f32) -> Tensor<1> {
    triplet_terms(emb, t, distance, margin).0.mean()
}
