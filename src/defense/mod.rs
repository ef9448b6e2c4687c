//! Robust training: each defense is an inner maximisation over the model's oracle (an objective
//! for the attack engine plus which batch rows move) and an outer loss over the embeddings the
//! model is trained on, one file per paper method behind the [`Defense`] trait; [`DefenseConfig`]
//! lists them, one line each. No defense holds a network: rdml's trainer and a PyTorch loop are
//! two callers of the same two halves.

pub mod act;
pub mod advprop;
pub mod ca_tride;
pub mod est;
#[cfg(test)]
pub mod example;
pub mod formulations;
pub mod generated;
pub mod hm;
pub mod madry;
pub mod mdprop;
pub mod memory;
pub mod positive_perturbation;
pub mod triplets;
pub mod unit;

pub use generated::{Generated, UxBank, UxTargets};
pub use hm::{Destination, HmObjective};
pub use memory::{EpochStart, Memory};
pub use triplets::{TripletLayout, hardness};
pub use unit::{Budget, Clean, DefendedLoss, Defense, DefenseState, Forward, Inner, Outer, Perturbed, Plan, Start};

use crate::attack::budget::Pgd;
use crate::attack::oracle::Oracle;
use crate::loss::{LossConfig, TupleLoss};
use anyhow::{Result, bail};
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;

crate::kinds::kind_registry! {
    /// The `[defense]` table: `kind` and that defense's own parameters, read by its own file.
    pub enum DefenseConfig: dyn Defense {
        "madry" => Madry(madry::Madry),
        "est" => Est(est::Est),
        "act" => Act(act::Act),
        "hm" => Hm(hm::HmConfig),
        "ca-tride" => CaTride(ca_tride::CaTrideConfig),
        "positive-perturbation" => PositivePerturbation(positive_perturbation::PositivePerturbationConfig),
        "formulation-1" => Formulation1(formulations::Joint),
        "formulation-2" => Formulation2(formulations::PerSample),
        "formulation-3" => Formulation3(formulations::RegularizedConfig),
        "mdprop" => Mdprop(mdprop::MdpropConfig),
        "advprop" => Advprop(advprop::Advprop),
        #[cfg(test)]
        "example-curriculum" => ExampleCurriculum(example::Curriculum),
    }
}

impl DefenseConfig {
    /// The inner maximisation's PGD at the start of training.
    pub fn pgd(&self) -> Pgd {
        self.unit().budget().pgd()
    }

    /// The generated distributions of MDProp / AdvProp-D (empty for the other defenses).
    pub fn distributions(&self) -> Vec<Generated> {
        self.unit().distributions()
    }

    /// Batch-norm sets the model needs.
    pub fn bn_sets(&self) -> usize {
        self.unit().bn_sets()
    }

    pub fn validate(&self, loss: &LossConfig) -> Result<()> {
        let unit = self.unit();
        unit.budget().validate()?;
        unit.validate(loss)?;
        // The defenses that perturb mined triplets train on the triplet loss; EST, MDProp and
        // AdvProp-D train on the configured loss, the tuple defenses check their own.
        if unit.triplet_based() && !matches!(loss.unit().tuple(), Some(TupleLoss::Triplet { .. })) {
            bail!(
                "defense {} trains on triplets: it needs loss.kind = \"triplet\" (got \"{}\")",
                self.name(),
                loss.name()
            );
        }
        Ok(())
    }
}

/// Runs only the defense's inner maximisation on `models` (one oracle per batch-norm set),
/// with a fresh memory that holds what `state` saved of it.
pub fn perturb(
    cfg: &DefenseConfig,
    loss_cfg: &LossConfig,
    models: &[&dyn Oracle],
    x: &Tensor<4>,
    labels: &[u32],
    state: &DefenseState,
    rng: &mut ChaCha8Rng,
) -> Result<Perturbed> {
    let mut memory = cfg.unit().memory();
    memory.restore(&state.memory)?;
    let items: Vec<usize> = (0..labels.len()).collect();
    let mut step = Inner {
        loss: loss_cfg,
        models,
        x: x.clone().without_autodiff(),
        labels,
        items: &items,
        state,
        memory: memory.as_ref(),
        rng,
        given: None,
    };
    Ok(cfg.unit().inner(&mut step)?.perturbed)
}
