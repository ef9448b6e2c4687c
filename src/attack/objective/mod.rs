//! Objectives over embeddings, one small file each. All are losses to minimise.

pub mod nn;
pub mod rank;
pub mod shift;
pub mod targets;

use crate::loss::distance::Distance;
use burn::tensor::Tensor;

/// Row-wise Euclidean distance of `e` `[b, d]` to every row of `x` `[n, d]` → `[b, n]`
/// (`x_sq` = squared norms of `x` as `[1, n]`, precomputed). The attacks rank in robrank's
/// Euclidean distance (its `N` metric on normalised embeddings).
pub fn dist_to_all(e: Tensor<2>, x: &Tensor<2>, x_sq: &Tensor<2>) -> Tensor<2> {
    Distance::Euclidean.cross(e, x, x_sq)
}

/// Row-wise Euclidean distance of two `[b, d]` tensors → `[b, 1]`.
pub fn dist_rows(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    Distance::Euclidean.rows(a, b).unsqueeze_dim(1)
}
