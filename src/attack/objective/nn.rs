//! The nearest-neighbour attack of the positive-perturbation paper (its Algorithm 1 and Eq. 5):
//! push a correctly retrieved query away from its nearest same-class neighbour x_j, i.e.
//! maximise d(f(z), f(x_j)) over the ε-ball (minimise its negative).

use super::dist_rows;
use crate::attack::engine::Objective;
use burn::tensor::Tensor;

pub struct AwayFromNeighbour {
    /// Embedding of each query's nearest same-class neighbour `[b, d]`.
    pub neighbour: Tensor<2>,
}

impl Objective for AwayFromNeighbour {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        dist_rows(emb, self.neighbour.clone()).mean().neg()
    }
}
