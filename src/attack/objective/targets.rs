//! Targeted feature-space objectives: TMA (pull the query's embedding toward a random test
//! embedding, `1 − cos`), GTM (move toward a chosen unmatching candidate), LTM (make the farthest
//! differently-labelled candidate closer than the nearest same-labelled one).

use super::{dist_rows, dist_to_all};
use crate::attack::objective::Objective;
use burn::tensor::activation::relu;
use burn::tensor::{Bool, Tensor};

/// TMA: `1 − cos(f(q̃), t)` with `t` one target embedding per query.
pub struct TowardCosine {
    pub target: Tensor<2>,
}

impl Objective for TowardCosine {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let n = emb.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
        let m = self.target.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
        let cos = (emb * self.target.clone()).sum_dim(1) / (n * m);
        cos.neg().add_scalar(1.0).mean()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let n = emb.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
        let m = self.target.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
        let cos = (emb * self.target.clone()).sum_dim(1) / (n * m);
        Some(cos.neg().add_scalar(1.0).reshape([b]))
    }
}

/// GTM: Euclidean distance to one target embedding per query.
pub struct TowardPoint {
    pub target: Tensor<2>,
}

impl Objective for TowardPoint {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        dist_rows(emb, self.target.clone()).mean()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        Some(dist_rows(emb, self.target.clone()).reshape([b]))
    }
}

/// LTM: `Σ_q [max_{x: y_x ≠ y_q} d(q̃,x) − min_{x: y_x = y_q} d(q̃,x)]_+` over the candidate set;
/// `same`/`diff` are `[b, n]` masks (the query's own slot left out of `same`, unless the
/// robrank-compatible mask keeps it).
pub struct LabelMislead {
    pub candidates: Tensor<2>,
    pub cand_sq: Tensor<2>,
    pub same: Tensor<2, Bool>,
    pub diff: Tensor<2, Bool>,
}

impl Objective for LabelMislead {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let d = dist_to_all(emb, &self.candidates, &self.cand_sq);
        let max_diff = d.clone().mask_fill(self.diff.clone().bool_not(), -1e9).max_dim(1);
        let min_same = d.mask_fill(self.same.clone().bool_not(), 1e9).min_dim(1);
        relu(max_diff - min_same).sum()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let d = dist_to_all(emb, &self.candidates, &self.cand_sq);
        let max_diff = d.clone().mask_fill(self.diff.clone().bool_not(), -1e9).max_dim(1);
        let min_same = d.mask_fill(self.same.clone().bool_not(), 1e9).min_dim(1);
        Some(relu(max_diff - min_same).reshape([b]))
    }
}

/// MDProp's feature-space examples (seed 004, Eq. 3 and Eq. 8): move `f(x̃)` toward T target
/// embeddings per item, `mean_t mean_i ‖f(x̃_i) − t_{t,i}‖`. One target of another class is a
/// single-targeted AX (STAX), several are a multi-targeted AX (MTAX), targets of the item's own
/// class an unadversarial example (UX).
pub struct TowardTargets {
    /// `T` tensors `[b, d]`.
    pub targets: Vec<Tensor<2>>,
}

impl Objective for TowardTargets {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let t = self.targets.len().max(1) as f32;
        let mut total: Option<Tensor<1>> = None;
        for target in &self.targets {
            let d = dist_rows(emb.clone(), target.clone()).mean();
            total = Some(match total {
                Some(s) => s + d,
                None => d,
            });
        }
        total
            .map(|s| s.div_scalar(t))
            .unwrap_or_else(|| emb.sum().mul_scalar(0.0))
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let mut total: Option<Tensor<2>> = None;
        for target in &self.targets {
            let d = dist_rows(emb.clone(), target.clone());
            total = Some(match total {
                Some(s) => s + d,
                None => d,
            });
        }
        total.map(|s| s.reshape([b]))
    }
}

/// MDProp's unadversarial objective over whole target sets (seed 004, Eq. 8):
/// `mean_i Σ_j w_ij ‖f(x̃_i) − c_j‖` with `w_ij = 1/|S_U(i)|` on item i's set of candidates `c_j`.
pub struct TowardSets {
    /// `[m, d]` candidate embeddings and their squared norms `[1, m]`.
    pub candidates: Tensor<2>,
    pub cand_sq: Tensor<2>,
    /// `[b, m]`: each row sums to 1 over its item's set.
    pub weights: Tensor<2>,
}

impl Objective for TowardSets {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        (dist_to_all(emb, &self.candidates, &self.cand_sq) * self.weights.clone())
            .sum_dim(1)
            .mean()
    }
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let d = dist_to_all(emb, &self.candidates, &self.cand_sq) * self.weights.clone();
        Some(d.sum_dim(1).reshape([b]))
    }
}
