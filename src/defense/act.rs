//! Anti-collapse triplet (ACT; Zhou et al., seed 003 Eq. 2–4, robrank `pnp_training_step`): the
//! positive and negative of each mined triplet are perturbed *toward each other* (minimising
//! `d(p̃, ñ)`, Eq. 4) while the anchor stays clean, and the model learns to separate them again
//! with `L_T(a, p̃, ñ)` (Eq. 2).

use super::triplets::{TripletLayout, adversarial_outer, perturb_mined};
use super::unit::{Budget, DefendedLoss, Defense, Inner, Outer, Plan};
use crate::attack::objective::Objective;
use crate::loss::distance::Distance;
use anyhow::Result;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// ACT's parameters (`[defense] kind = "act"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Act(pub Budget);

impl Defense for Act {
    fn budget(&self) -> Budget {
        self.0
    }

    fn triplet_based(&self) -> bool {
        true
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let pgd = self.pgd(step.state);
        perturb_mined(step, &pgd, (false, true, true), |layout, distance| {
            Box::new(Collapse { layout, distance })
        })
        .map(Plan::adversarial)
    }

    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        adversarial_outer(plan, emb, step)
    }
}

/// Eq. 4: minimise `mean d(p̃, ñ)` (robrank's `F.pairwise_distance`, [`Distance::pairwise`]); the
/// anchor rows are frozen by the plan, not by this loss.
pub struct Collapse {
    pub layout: TripletLayout,
    pub distance: Distance,
}

impl Objective for Collapse {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (_, p, n) = self.layout.split(emb);
        self.distance.pairwise(p, n).mean()
    }

    /// The anchors stay clean and out of Eq. 4.
    fn reads_fixed_rows(&self) -> bool {
        false
    }
}
