//! Objectives over embeddings, one small file each. All are losses to minimise.

pub mod nn;
pub mod rank;
pub mod shift;
pub mod targets;

use crate::loss::distance::Distance;
use burn::tensor::{Bool, Tensor};

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

/// What an attack optimises. `loss` receives the embeddings `[b, d]` of the current adversarial
/// images (with autodiff) and returns a scalar to minimise; `step` is the iteration index.
pub trait Objective {
    fn loss(&self, emb: Tensor<2>, step: usize) -> Tensor<1>;
    /// Whether `loss` reads the rows that do not move (the engine embeds them once when it does;
    /// ACT's objective reads only the moving positives and negatives, so the anchors are never
    /// embedded).
    fn reads_fixed_rows(&self) -> bool {
        true
    }
    /// When to stop early, judged from the losses of the steps so far; `None`: run every step.
    fn stop_rule(&self) -> Option<StopRule> {
        None
    }
    /// Per-row margins `[b]`, zero once a row is adversarial: what C&W's attack
    /// ([`crate::attack::cw::cw_linf`]) weighs with its constant. `None` for objectives without one.
    fn per_row(&self, _emb: Tensor<2>) -> Option<Tensor<1>> {
        None
    }
    /// Each row's own term of `loss` `[b]` (up to a positive factor common to all rows: `loss`
    /// may average what this lists), for estimators that query the model row by row without its
    /// gradient (NES); `None` for an objective whose rows do not separate.
    fn row_losses(&self, _emb: Tensor<2>) -> Option<Tensor<1>> {
        None
    }
}

/// An early stop, decided on the device from the last losses, so that a step waits on nothing:
/// once it holds, the images stop changing (the later steps leave them as they are), and the
/// engine leaves the loop at its next look at the flag ([`crate::attack::engine::Request::run_checking`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StopRule {
    /// Stop before step k when |loss_{k−1} − loss_{k−2}| < `tol` (robrank's saturation test).
    Saturated { tol: f32 },
    /// Stop before step k when loss_{k−1} < the bound.
    Below(f32),
}

impl StopRule {
    /// Whether to stop, from the last loss and the one before it (detached, `[1]`).
    pub(in crate::attack) fn holds(
        self,
        last: Option<&Tensor<1>>,
        before: Option<&Tensor<1>>,
    ) -> Option<Tensor<1, Bool>> {
        match (self, last, before) {
            (Self::Saturated { tol }, Some(a), Some(b)) => Some((a.clone() - b.clone()).abs().lower_elem(tol)),
            (Self::Below(bound), Some(a), _) => Some(a.clone().lower_elem(bound)),
            _ => None,
        }
    }
}
