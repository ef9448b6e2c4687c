//! Objectives over embeddings, one small file each. All are losses to minimise.

pub mod nn;
pub mod rank;
pub mod shift;
pub mod targets;

use burn::tensor::Tensor;

/// Row-wise Euclidean distance of `e` `[b, d]` to every row of `x` `[n, d]` → `[b, n]`
/// (`x_sq` = squared norms of `x` as `[1, n]`, precomputed).
pub fn dist_to_all(e: Tensor<2>, x: &Tensor<2>, x_sq: &Tensor<2>) -> Tensor<2> {
    let e_sq = e.clone().powi_scalar(2).sum_dim(1);
    let dots = e.matmul(x.clone().transpose());
    (e_sq + x_sq.clone() - dots.mul_scalar(2.0))
        .clamp_min(0.0)
        .add_scalar(1e-12)
        .sqrt()
}

/// Row-wise Euclidean distance of two `[b, d]` tensors → `[b, 1]`.
pub fn dist_rows(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    (a - b).powi_scalar(2).sum_dim(1).add_scalar(1e-12).sqrt()
}
