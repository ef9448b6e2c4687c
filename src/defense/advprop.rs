//! AdvProp-D (seed 004, Sec. 3.1.4): MDProp with one extra distribution, STAX (one target of
//! another class), through its own batch-norm set.

use super::generated::Generated;
use super::mdprop::Propagation;
use super::unit::{Budget, DefendedLoss, Defense, DefenseState, Inner, Outer, Plan};
use anyhow::Result;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// AdvProp-D's parameters (`[defense] kind = "advprop"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Advprop(pub Budget);

impl Advprop {
    fn propagation(&self, state: &DefenseState) -> Propagation {
        Propagation {
            pgd: self.pgd(state),
            distributions: self.distributions(),
            separate_bn: true,
        }
    }
}

impl Defense for Advprop {
    fn budget(&self) -> Budget {
        self.0
    }

    fn outer_is_the_loss(&self) -> bool {
        true
    }

    fn distributions(&self) -> Vec<Generated> {
        vec![Generated::Stax]
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        self.propagation(step.state).inner(step)
    }

    fn outer(&self, _plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        self.propagation(step.state).outer(emb, step)
    }
}
