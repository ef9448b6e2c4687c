//! Positive-perturbation robust DML (seed 000, Sec. 3.5): before the usual step, the positive of
//! each mined tuple is replaced, with probability `P(γ = 1)` (the attack rate), by its adversarial
//! variant `x₂ + ρ₍₂,₁₎`, where `ρ` (Eq. 14) pushes a same-class point away from the anchor and a
//! different-class point toward it. Eq. 15 (contrastive) and Eq. 16 (triplet) are the same plan on
//! our tuple layout; Appendix F's negative and anchor targets and formulation 3's regulariser
//! (Eq. 13, `λ·max_z d(f(z), f(x))` on the anchors) are options.

use super::{DefendedLoss, DefenseConfig, Perturbed, TripletLayout, select_rows, triplet_params};
use crate::attack::engine::{self, Objective};
use crate::loss::LossConfig;
use crate::loss::distance::Distance;
use crate::loss::miner::Triplets;
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::tensor::Tensor;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Positive perturbation's parameters (`[defense] kind = "positive-perturbation"`): the
/// positive of each tuple, with probability `rate`, pushed away from its anchor; for the triplet
/// and contrastive losses.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PositivePerturbationConfig {
    pub eps: f32,
    pub step: f32,
    pub steps: usize,
    /// Attack rate P(γ = 1).
    pub rate: f32,
    #[serde(default)]
    pub target: PerturbTarget,
    /// λ of formulation 3 (Eq. 13): adds `λ·max_z d(f(z), f(x))` over the anchors.
    #[serde(default)]
    pub regularizer: Option<f32>,
}

impl super::config::DefenseParams for PositivePerturbationConfig {
    fn budget(&self) -> (f32, f32, usize) {
        (self.eps, self.step, self.steps)
    }
    fn validate(&self, loss: &LossConfig) -> Result<()> {
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.rate),
            "defense.rate (P(γ = 1)) must be in [0, 1], got {}",
            self.rate
        );
        if let Some(l) = self.regularizer {
            anyhow::ensure!(l.is_finite() && l >= 0.0, "defense.regularizer must be ≥ 0, got {l}");
        }
        anyhow::ensure!(
            matches!(loss, LossConfig::Triplet { .. } | LossConfig::Contrastive { .. }),
            "defense positive-perturbation is defined for loss.kind = \"triplet\" or \"contrastive\" (got \"{}\")",
            loss.name()
        );
        Ok(())
    }
}

/// Which item of a tuple `ρ` perturbs (the paper's choice and its Appendix F alternatives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PerturbTarget {
    /// `x₂ + γρ₍₂,₁₎`: away from the anchor (Eq. 15, 16).
    #[default]
    Positive,
    /// `x₃ + γρ₍₃,₁₎`: toward the anchor.
    Negative,
    /// `x₁ + γρ₍₁,₂,₃₎`: away from the positive, toward the negative.
    Anchor,
}

/// Eq. 14 over the stacked rows: maximise `1[y_i = y_j] d(x_i + δ, x_j) − 1[y_i ≠ y_k] d(x_i + δ, x_k)`
/// for the target item of each tuple (minimises the negative).
pub struct Rho {
    pub layout: TripletLayout,
    pub distance: Distance,
    pub target: PerturbTarget,
}

impl Objective for Rho {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (a, p, n) = self.layout.split(emb);
        let d = self.distance;
        match self.target {
            PerturbTarget::Positive => d.rows(p, a).mean().neg(),
            PerturbTarget::Negative => d.rows(n, a).mean(),
            PerturbTarget::Anchor => (d.rows(a.clone(), p) - d.rows(a, n)).mean().neg(),
        }
    }
}

/// The rows `ρ` may move: the target third, each tuple with probability `rate` (γ ~ Bernoulli).
pub fn plan(layout: &TripletLayout, target: PerturbTarget, rate: f32, rng: &mut ChaCha8Rng) -> Vec<bool> {
    let third = match target {
        PerturbTarget::Anchor => 0,
        PerturbTarget::Positive => 1,
        PerturbTarget::Negative => 2,
    };
    let mut m = vec![false; 3 * layout.t];
    for k in 0..layout.t {
        m[third * layout.t + k] = rng.random::<f32>() < rate;
    }
    m
}

/// The configured tuple loss (triplet or contrastive) on the stacked rows, plus formulation 3's
/// regulariser `λ·mean d(f(ã_ES), f(a))` with `ã_ES` the ES attack on the anchors.
pub fn outer(
    cfg: &DefenseConfig,
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    x: &Tensor<4>,
    pert: Perturbed,
    regularizer: Option<f32>,
) -> Result<DefendedLoss> {
    let (distance, _) = triplet_params(loss_cfg);
    let empty = Triplets::default();
    let tr = pert.triplets.as_ref().unwrap_or(&empty);
    let t = tr.len();
    let (emb, reg) = match regularizer {
        Some(lambda) => {
            let anchors = select_rows(&x.clone().without_autodiff(), &tr.anchor);
            let clean_a = super::host_rows(&pert.clean, &tr.anchor, pert.dim, &anchors.device());
            let es = engine::attack(
                net,
                0,
                &anchors,
                None,
                &crate::attack::objective::shift::EmbeddingShift { clean: clean_a },
                &cfg.pgd(),
                0,
            )?;
            let all = net.forward(Tensor::cat(
                vec![pert.adversarial.clone(), es, anchors]
                    .into_iter()
                    .map(|v| v.autodiff())
                    .collect(),
                0,
            ));
            let (e3, e_es, e_a) = (
                all.clone().narrow(0, 0, 3 * t),
                all.clone().narrow(0, 3 * t, t),
                all.narrow(0, 4 * t, t),
            );
            (e3, Some(distance.rows(e_es, e_a).mean().mul_scalar(lambda)))
        }
        None => (net.forward(pert.adversarial.clone().autodiff()), None),
    };
    super::triplet_outcome(loss_cfg, &pert, emb, reg)
}
