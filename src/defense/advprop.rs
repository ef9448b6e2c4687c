//! AdvProp-D (seed 004, Sec. 3.1.4): MDProp with one extra distribution, STAX (one target of
//! another class), through its own batch-norm set.

use super::generated::Generated;
use super::mdprop::Propagation;
use super::unit::{Budget, DefendedLoss, Defense, Perturbed, Step};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// AdvProp-D's parameters (`[defense] kind = "advprop"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Advprop(pub Budget);

impl Advprop {
    fn propagation(&self, step: &Step) -> Propagation {
        Propagation {
            pgd: self.pgd(step.state),
            distributions: self.distributions(),
            separate_bn: true,
        }
    }
}

impl Defense for Advprop {
    fn budget(&self) -> Budget {
        self.0
    }

    fn distributions(&self) -> Vec<Generated> {
        vec![Generated::Stax]
    }

    fn perturb(&self, step: &mut Step) -> Result<Perturbed> {
        self.propagation(step).perturb(step)
    }

    fn loss(&self, step: &mut Step) -> Result<DefendedLoss> {
        self.propagation(step).loss(step)
    }
}
