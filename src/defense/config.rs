//! The `[defense]` table: which defense, its PGD budget and its parameters, their validation, and
//! the state a defense carries between training steps.

use super::{ca_tride, mdprop, positive_perturbation};
use crate::attack::engine::{self, Pgd};
use crate::loss::LossConfig;
use crate::loss::miner::Miner;
use anyhow::{Result, bail, ensure};
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
    "mdprop",
    "advprop",
];

/// The `[defense]` table. Every defense gets its own PGD budget (in pixel units).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DefenseConfig {
    /// Madry adversarial training on the triplet loss: (a, p, n) perturbed to maximise it.
    Madry { eps: f32, step: f32, steps: usize },
    /// Embedding-shifted triplet (EST): every image shifted as far as possible in embedding space,
    /// then the configured loss on the shifted embeddings.
    Est { eps: f32, step: f32, steps: usize },
    /// Anti-collapse triplet (ACT): p and n pushed toward each other, the anchor clean.
    Act { eps: f32, step: f32, steps: usize },
    /// Hardness manipulation HM[source, destination] with optional ICS term weight `ics`.
    Hm {
        eps: f32,
        step: f32,
        steps: usize,
        source: Miner,
        destination: Destination,
        #[serde(default)]
        objective: HmObjective,
        #[serde(default)]
        ics: Option<f32>,
    },
    /// Positive-perturbation robust DML: the positive of each tuple, with probability `rate`,
    /// pushed away from its anchor; for the triplet and contrastive losses.
    PositivePerturbation {
        eps: f32,
        step: f32,
        steps: usize,
        /// Attack rate P(γ = 1).
        rate: f32,
        #[serde(default)]
        target: positive_perturbation::PerturbTarget,
        /// λ of formulation 3 (Eq. 13): adds `λ·max_z d(f(z), f(x))` over the anchors.
        #[serde(default)]
        regularizer: Option<f32>,
    },
    /// MDProp: extra generated distributions (STAX, MTAX, UX), each with its own BN set.
    Mdprop {
        eps: f32,
        step: f32,
        steps: usize,
        distributions: Vec<mdprop::Generated>,
    },
    /// AdvProp-D: MDProp with one extra BN set and STAX.
    Advprop { eps: f32, step: f32, steps: usize },
    /// CA-TRIDE: CAP and ANP alternating per mini-batch under collapse awareness.
    CaTride {
        eps: f32,
        step: f32,
        steps: usize,
        /// Attention factor λ of collapseness (CUB 10, CARS 9.5, SOP 2).
        #[serde(default = "ten")]
        lambda: f32,
        /// γ and β_TR of the top-rank triplet L_TR.
        #[serde(default = "half")]
        gamma_tr: f32,
        #[serde(default = "f0_04")]
        beta_tr: f32,
        #[serde(default)]
        mode: ca_tride::TrideMode,
        #[serde(default)]
        adversary: ca_tride::Adversary,
        /// PGD step `α·epoch/epochs` (the reference code's progressive step; zero in epoch 1).
        #[serde(default = "yes")]
        progressive: bool,
        /// Semihard mining with an epoch-wise margin instead of the loss's miner: `paper` (or
        /// `true`) is Eq. 32's `η₀(1 − (e/2E)²)`, `reference` the reference code's
        /// `η₀(1 − e/2E)²`, `off` (or `false`) the loss's own miner.
        #[serde(default)]
        margin_schedule: ca_tride::MarginSchedule,
        /// Weight *farther* pairs more, as the reference code does (`exp(λ(d − max d))`), instead
        /// of the paper's anchor-proximity weights (Eq. 6).
        #[serde(default)]
        code_weighting: bool,
        /// ANP's loss as the reference code writes it, `[w̄_ap − w̄_an]_+ + γ·[d̄(Ã, N_υ) −
        /// d̄(Ã, A₀)]_+` with `γ = e^{−[w̄_an − w̄_ap]_+}` (collapse held back, the anchor pushed at
        /// least as far as its closest negatives), instead of the paper's Eq. 11–12.
        #[serde(default)]
        code_anp: bool,
        /// `L_TR` with the reference code's hinge `γ·[·]_+` instead of Eq. 13 as written.
        #[serde(default)]
        tr_hinge: bool,
    },
}

fn ten() -> f32 {
    10.0
}
fn half() -> f32 {
    0.5
}
fn f0_04() -> f32 {
    0.04
}
fn yes() -> bool {
    true
}

impl DefenseConfig {
    pub fn name(&self) -> &'static str {
        match self {
            DefenseConfig::Madry { .. } => "madry",
            DefenseConfig::Est { .. } => "est",
            DefenseConfig::Act { .. } => "act",
            DefenseConfig::Hm { .. } => "hm",
            DefenseConfig::CaTride { .. } => "ca-tride",
            DefenseConfig::PositivePerturbation { .. } => "positive-perturbation",
            DefenseConfig::Mdprop { .. } => "mdprop",
            DefenseConfig::Advprop { .. } => "advprop",
        }
    }

    pub fn pgd(&self) -> Pgd {
        let (eps, step, steps) = match *self {
            DefenseConfig::Madry { eps, step, steps }
            | DefenseConfig::Est { eps, step, steps }
            | DefenseConfig::Act { eps, step, steps }
            | DefenseConfig::Hm { eps, step, steps, .. }
            | DefenseConfig::CaTride { eps, step, steps, .. }
            | DefenseConfig::PositivePerturbation { eps, step, steps, .. }
            | DefenseConfig::Mdprop { eps, step, steps, .. }
            | DefenseConfig::Advprop { eps, step, steps } => (eps, step, steps),
        };
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
            DefenseConfig::Mdprop { distributions, .. } => distributions.clone(),
            DefenseConfig::Advprop { .. } => vec![mdprop::Generated::Stax],
            _ => vec![],
        }
    }

    /// Batch-norm sets the model needs: one per distribution (clean included).
    pub fn bn_sets(&self) -> usize {
        1 + self.distributions().len()
    }

    pub fn validate(&self, loss: &LossConfig) -> Result<()> {
        self.pgd().validate_as("defense.")?;
        if matches!(self, DefenseConfig::Mdprop { .. } | DefenseConfig::Advprop { .. }) {
            let d = self.distributions();
            ensure!(
                !d.is_empty(),
                "defense.distributions must list at least one of stax, mtax, ux"
            );
            for g in &d {
                ensure!(g.targets().0 >= 1, "defense.distributions: targets must be ≥ 1");
            }
            return Ok(());
        }
        if let DefenseConfig::PositivePerturbation { rate, regularizer, .. } = self {
            ensure!(
                (0.0..=1.0).contains(rate),
                "defense.rate (P(γ = 1)) must be in [0, 1], got {rate}"
            );
            if let Some(l) = regularizer {
                ensure!(l.is_finite() && *l >= 0.0, "defense.regularizer must be ≥ 0, got {l}");
            }
            ensure!(
                matches!(loss, LossConfig::Triplet { .. } | LossConfig::Contrastive { .. }),
                "defense positive-perturbation is defined for loss.kind = \"triplet\" or \"contrastive\" (got \"{}\")",
                loss.name()
            );
            return Ok(());
        }
        let triplet_based = !matches!(self, DefenseConfig::Est { .. });
        if triplet_based && !matches!(loss, LossConfig::Triplet { .. }) {
            bail!(
                "defense {} trains on triplets: it needs loss.kind = \"triplet\" (got \"{}\")",
                self.name(),
                loss.name()
            );
        }
        if let DefenseConfig::CaTride {
            lambda,
            gamma_tr,
            beta_tr,
            ..
        } = self
        {
            ensure!(lambda.is_finite() && *lambda > 0.0, "defense.lambda must be > 0");
            ensure!(
                *gamma_tr >= 0.0 && *beta_tr >= 0.0,
                "defense.gamma_tr and beta_tr must be ≥ 0"
            );
        }
        if let DefenseConfig::Hm { ics: Some(l), .. } = self {
            ensure!(l.is_finite() && *l >= 0.0, "defense.ics must be ≥ 0, got {l}");
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
