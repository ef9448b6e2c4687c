//! The `[defense]` table: which defense, its PGD budget and its parameters, their validation, and
//! the state a defense carries between training steps.

use super::{ca_tride, formulations, hm, mdprop, positive_perturbation};
use crate::attack::engine::{self, Pgd};
use crate::loss::LossConfig;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Destination hardness of Hardness Manipulation: another miner's triplets, or LGA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Destination {
    Random,
    Semihard,
    Softhard,
    Distance,
    Hardest,
    /// Linear gradual adversary `g_LGA(ℓ̄_{t−1}) = −γ·ℓ̄_{t−1}/γ` (clamped to [0, γ]) of HM.
    Lga,
}

/// How HM aligns the source hardness with the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HmObjective {
    /// `mean(min(0, H̃_S − H_D)²)`: stops at the destination.
    #[default]
    Et,
    /// robrank's "KL" on L1-normalised hardness vectors.
    Kl,
    /// `mean((H̃_S − H_D)²)`.
    L2,
}

/// The values of `kind` in `[defense]`.
pub const KINDS: &[&str] = &[
    "madry",
    "est",
    "act",
    "hm",
    "ca-tride",
    "positive-perturbation",
    "formulation-1",
    "formulation-2",
    "formulation-3",
    "mdprop",
    "advprop",
];

/// The PGD budget alone: the parameters of Madry, EST, ACT and AdvProp-D.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PgdOnly {
    pub eps: f32,
    pub step: f32,
    pub steps: usize,
}

/// A defense's own parameters: its PGD budget (in pixel units) and their checks.
pub trait DefenseParams {
    /// `(eps, step, steps)` of the inner maximisation.
    fn budget(&self) -> (f32, f32, usize);
    /// Checks the parameters beyond the budget, against the loss they train with.
    fn validate(&self, _loss: &LossConfig) -> Result<()> {
        Ok(())
    }
}

impl DefenseParams for PgdOnly {
    fn budget(&self) -> (f32, f32, usize) {
        (self.eps, self.step, self.steps)
    }
}

/// The `[defense]` table: `kind` and that defense's own parameters, read by its own file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DefenseConfig {
    /// Madry adversarial training on the triplet loss: (a, p, n) perturbed to maximise it.
    Madry(PgdOnly),
    /// Embedding-shifted triplet (EST): every image shifted as far as possible in embedding space,
    /// then the configured loss on the shifted embeddings.
    Est(PgdOnly),
    /// Anti-collapse triplet (ACT): p and n pushed toward each other, the anchor clean.
    Act(PgdOnly),
    /// Hardness manipulation HM[source, destination] with optional ICS term.
    Hm(hm::HmConfig),
    /// Positive-perturbation robust DML.
    PositivePerturbation(positive_perturbation::PositivePerturbationConfig),
    /// Seed 000's formulation 1 (Eq. 11): every image of the batch perturbed jointly.
    #[serde(rename = "formulation-1")]
    Formulation1(PgdOnly),
    /// Seed 000's formulation 2 (Eq. 12): each anchor perturbed with the rest of the batch intact.
    #[serde(rename = "formulation-2")]
    Formulation2(PgdOnly),
    /// Seed 000's formulation 3 (Eq. 13): the clean loss plus λ times the embedding shift.
    #[serde(rename = "formulation-3")]
    Formulation3(formulations::RegularizedConfig),
    /// MDProp: extra generated distributions (STAX, MTAX, UX), each with its own BN set.
    Mdprop(mdprop::MdpropConfig),
    /// AdvProp-D: MDProp with one extra BN set and STAX.
    Advprop(PgdOnly),
    /// CA-TRIDE: CAP and ANP alternating per mini-batch under collapse awareness.
    CaTride(ca_tride::CaTrideConfig),
}

impl DefenseConfig {
    pub fn name(&self) -> &'static str {
        match self {
            DefenseConfig::Madry(_) => "madry",
            DefenseConfig::Est(_) => "est",
            DefenseConfig::Act(_) => "act",
            DefenseConfig::Hm(_) => "hm",
            DefenseConfig::CaTride(_) => "ca-tride",
            DefenseConfig::PositivePerturbation(_) => "positive-perturbation",
            DefenseConfig::Formulation1(_) => "formulation-1",
            DefenseConfig::Formulation2(_) => "formulation-2",
            DefenseConfig::Formulation3(_) => "formulation-3",
            DefenseConfig::Mdprop(_) => "mdprop",
            DefenseConfig::Advprop(_) => "advprop",
        }
    }

    /// The defense's own parameters.
    pub fn params(&self) -> &dyn DefenseParams {
        match self {
            DefenseConfig::Madry(c) | DefenseConfig::Est(c) | DefenseConfig::Act(c) | DefenseConfig::Advprop(c) => c,
            DefenseConfig::Formulation1(c) | DefenseConfig::Formulation2(c) => c,
            DefenseConfig::Formulation3(c) => c,
            DefenseConfig::Hm(c) => c,
            DefenseConfig::CaTride(c) => c,
            DefenseConfig::PositivePerturbation(c) => c,
            DefenseConfig::Mdprop(c) => c,
        }
    }

    pub fn pgd(&self) -> Pgd {
        let (eps, step, steps) = self.params().budget();
        Pgd {
            eps,
            step,
            steps,
            norm: engine::Norm::Linf,
            random_start: false,
        }
    }

    /// The generated distributions of MDProp / AdvProp-D (empty for the other defenses).
    pub fn distributions(&self) -> Vec<mdprop::Generated> {
        match self {
            DefenseConfig::Mdprop(c) => c.distributions.clone(),
            DefenseConfig::Advprop(_) => vec![mdprop::Generated::Stax],
            _ => vec![],
        }
    }

    /// Batch-norm sets the model needs: one per distribution (clean included), or one when
    /// MDProp shares the clean set.
    pub fn bn_sets(&self) -> usize {
        match self {
            DefenseConfig::Mdprop(c) if !c.separate_bn => 1,
            _ => 1 + self.distributions().len(),
        }
    }

    pub fn validate(&self, loss: &LossConfig) -> Result<()> {
        self.pgd().validate_as("defense.")?;
        self.params().validate(loss)?;
        if let DefenseConfig::Formulation1(_) | DefenseConfig::Formulation2(_) = self {
            formulations::tuple_loss_only(self.name(), loss)?;
        }
        // The defenses that perturb mined triplets train on the triplet loss; EST, MDProp and
        // AdvProp-D train on the configured loss, positive perturbation checks its own.
        let triplet_based = matches!(
            self,
            DefenseConfig::Madry(_) | DefenseConfig::Act(_) | DefenseConfig::Hm(_) | DefenseConfig::CaTride(_)
        );
        if triplet_based && !matches!(loss, LossConfig::Triplet { .. }) {
            bail!(
                "defense {} trains on triplets: it needs loss.kind = \"triplet\" (got \"{}\")",
                self.name(),
                loss.name()
            );
        }
        Ok(())
    }
}

/// State a defense carries from one training step to the next (checkpointed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DefenseState {
    /// The previous step's adversarial triplet loss (LGA's ℓ̄_{t−1}); robrank starts at 2.0.
    pub prev_loss: f32,
    pub steps_done: u64,
    /// The current epoch (0-based) and the run's epoch count, for schedules.
    #[serde(default)]
    pub epoch: usize,
    #[serde(default)]
    pub epochs: usize,
}

impl Default for DefenseState {
    fn default() -> Self {
        Self {
            prev_loss: 2.0,
            steps_done: 0,
            epoch: 0,
            epochs: 1,
        }
    }
}
