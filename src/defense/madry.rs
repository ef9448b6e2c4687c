//! Madry adversarial training adapted to the triplet loss (robrank's AMD baseline): the mined
//! (a, p, n) are all perturbed to maximise the triplet hardness `d(ã,p̃) − d(ã,ñ)`, and the model
//! is trained on the triplet loss of the perturbed triplet.

use super::triplets::{TripletLayout, adversarial_outer, hardness, perturb_mined};
use super::unit::{Budget, DefendedLoss, Defense, Inner, Outer, Plan};
use crate::attack::objective::Objective;
use crate::loss::distance::Distance;
use anyhow::Result;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// Madry's parameters (`[defense] kind = "madry"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Madry(pub Budget);

impl Defense for Madry {
    fn budget(&self) -> Budget {
        self.0
    }

    fn triplet_based(&self) -> bool {
        true
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let pgd = self.pgd(step.state);
        perturb_mined(step, &pgd, (true, true, true), |layout, distance| {
            Box::new(MaxHardness { layout, distance })
        })
        .map(Plan::adversarial)
    }

    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        adversarial_outer(plan, emb, step)
    }
}

/// Minimises `mean(d(ã,ñ) − d(ã,p̃))`, i.e. maximises the hardness of every triplet.
pub struct MaxHardness {
    pub layout: TripletLayout,
    pub distance: Distance,
}

impl Objective for MaxHardness {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (a, p, n) = self.layout.split(emb);
        hardness(a, p, n, self.distance).mean().neg()
    }
}
