//! Anti-collapse triplet (ACT; Zhou et al., seed 003 Eq. 2–4, robrank `pnp_training_step`): the
//! positive and negative of each mined triplet are perturbed *toward each other* (minimising
//! `d(p̃, ñ)`, Eq. 4) while the anchor stays clean, and the model learns to separate them again
//! with `L_T(a, p̃, ñ)` (Eq. 2).

use super::TripletLayout;
use crate::attack::engine::Objective;
use crate::loss::distance::Distance;
use burn::tensor::Tensor;

/// Eq. 4: minimise `mean d(p̃, ñ)`; the anchor rows are frozen by the plan, not by this loss.
pub struct Collapse {
    pub layout: TripletLayout,
    pub distance: Distance,
}

impl Objective for Collapse {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (_, p, n) = self.layout.split(emb);
        self.distance.rows(p, n).mean()
    }
}
