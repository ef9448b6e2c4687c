//! The nearest-neighbour attack of the positive-perturbation paper (its Algorithm 1 and Eq. 5):
//! push a correctly retrieved query away from its nearest same-class neighbour x_j, i.e.
//! maximise d(f(z), f(x_j)) over the ε-ball (minimise its negative).

use super::{dist_rows, dist_to_all};
use crate::attack::objective::Objective;
use burn::tensor::activation::relu;
use burn::tensor::{Bool, Tensor};

pub struct AwayFromNeighbour {
    /// Embedding of each query's nearest same-class neighbour `[b, d]`.
    pub neighbour: Tensor<2>,
}

impl Objective for AwayFromNeighbour {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        dist_rows(emb, self.neighbour.clone()).mean().neg()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        Some(dist_rows(emb, self.neighbour.clone()).reshape([b]).neg())
    }
}

/// Carlini–Wagner's margin objective (their Sec. V, `f₆` with confidence κ) for Algorithm 1,
/// minimised by the L∞ engine as Madry et al.'s "CW∞": `[d(z, o*) − d(z, x_j) + κ]_+` with `o*` the
/// nearest candidate of another class at each step — zero once some other class is nearer than the
/// same-class neighbour by κ.
pub struct CwMargin {
    pub neighbour: Tensor<2>,
    /// All candidate embeddings `[n, d]`, their squared norms `[1, n]`, and the `[b, n]` mask of
    /// candidates of another class than the query's.
    pub candidates: Tensor<2>,
    pub cand_sq: Tensor<2>,
    pub other: Tensor<2, Bool>,
    pub kappa: f32,
}

impl Objective for CwMargin {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        self.margins(emb).mean()
    }
    fn per_row(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        Some(self.margins(emb))
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        Some(self.margins(emb))
    }
}

impl CwMargin {
    fn margins(&self, emb: Tensor<2>) -> Tensor<1> {
        let [b, _] = emb.dims();
        let same = dist_rows(emb.clone(), self.neighbour.clone());
        let d = dist_to_all(emb, &self.candidates, &self.cand_sq);
        let nearest_other = d.mask_fill(self.other.clone().bool_not(), 1e9).min_dim(1);
        relu(nearest_other - same + self.kappa).reshape([b])
    }
}
