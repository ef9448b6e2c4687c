//! Ranking attacks (Zhou et al., ECCV'20), with X the embeddings of the whole test set:
//! - candidate attack CA+ / CA− perturbs a candidate c to raise / lower its rank in the list of a
//!   fixed query q: `mean_x [d(c̃,q) − d(x,q)]_+` / `mean_x [d(x,q) − d(c̃,q)]_+`;
//! - query attack QA+ / QA− perturbs a query q to raise / lower a fixed candidate c:
//!   `mean_x [d(q̃,c) − d(q̃,x)]_+` / `mean_x [d(q̃,x) − d(q̃,c)]_+`.
//!
//! GTT is QA− with the query's current top-1 as c.

use super::{dist_rows, dist_to_all};
use crate::attack::objective::Objective;
use burn::tensor::Tensor;
use burn::tensor::activation::relu;

/// Whether the attack raises (+) or lowers (−) the rank of the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Raise,
    Lower,
}

/// CA±: the perturbed items are candidates; `query` holds each one's fixed query `[b, d]`, and
/// `dxq` the distances of every test embedding to that query `[b, n]` (constants).
pub struct CandidateAttack {
    pub query: Tensor<2>,
    pub dxq: Tensor<2>,
    pub direction: Direction,
}

impl Objective for CandidateAttack {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let dcq = dist_rows(emb, self.query.clone()); // [b, 1]
        let diff = match self.direction {
            Direction::Raise => dcq - self.dxq.clone(),
            Direction::Lower => self.dxq.clone() - dcq,
        };
        relu(diff).mean_dim(1).mean()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let dcq = dist_rows(emb, self.query.clone());
        let diff = match self.direction {
            Direction::Raise => dcq - self.dxq.clone(),
            Direction::Lower => self.dxq.clone() - dcq,
        };
        Some(relu(diff).mean_dim(1).reshape([b]))
    }
}

/// QA± (and GTT): the perturbed items are queries; `candidate` holds each one's target `[b, d]`.
pub struct QueryAttack {
    pub candidate: Tensor<2>,
    pub all: Tensor<2>,
    pub all_sq: Tensor<2>,
    pub direction: Direction,
}

impl Objective for QueryAttack {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let dqx = dist_to_all(emb.clone(), &self.all, &self.all_sq); // [b, n]
        let dqc = dist_rows(emb, self.candidate.clone()); // [b, 1]
        let diff = match self.direction {
            Direction::Raise => dqc - dqx,
            Direction::Lower => dqx - dqc,
        };
        relu(diff).mean_dim(1).mean()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let dqx = dist_to_all(emb.clone(), &self.all, &self.all_sq);
        let dqc = dist_rows(emb, self.candidate.clone());
        let diff = match self.direction {
            Direction::Raise => dqc - dqx,
            Direction::Lower => dqx - dqc,
        };
        Some(relu(diff).mean_dim(1).reshape([b]))
    }
}
