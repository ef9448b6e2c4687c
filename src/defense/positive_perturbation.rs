//! Positive-perturbation robust DML (seed 000, §3.5): before the usual step, the positive of
//! each mined tuple is replaced, with probability `P(γ = 1)` (the attack rate), by its adversarial
//! variant `x₂ + ρ₍₂,₁₎`, where `ρ` (Eq. 14) pushes a same-class point away from the anchor and a
//! different-class point toward it. Eq. 15 (contrastive) and Eq. 16 (triplet) are the same plan on
//! our tuple layout; Appendix F's negative and anchor targets and formulation 3's regulariser
//! (Eq. 13, over every image of the batch) are options.

use super::triplets::{self, TripletLayout, triplet_params};
use super::unit::{Budget, Clean, DefendedLoss, Defense, Inner, Outer, Perturbed, Plan, Start, one};
use crate::attack::engine::{Model, Request};
use crate::attack::objective::Objective;
use crate::loss::distance::Distance;
use crate::loss::miner::{Rows, Triplets};
use crate::loss::{LossConfig, TupleLoss};
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
    /// Where the inner maximisation starts and whether it projects ([`Budget`]).
    #[serde(default, skip_serializing_if = "Start::is_clean")]
    pub start: Start,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<f32>,
    #[serde(default = "crate::field::yes", skip_serializing_if = "crate::field::is_yes")]
    pub project: bool,
    /// Attack rate P(γ = 1).
    pub rate: f32,
    #[serde(default)]
    pub target: PerturbTarget,
    /// λ of formulation 3 (Eq. 13): adds `λ·(1/n) Σ_i max_z d(f(z), f(x_i))` over every image of
    /// the batch to the positive-perturbed loss (with `rate = 0`, Eq. 13 itself; `kind =
    /// "formulation-3"` is that alone).
    #[serde(default)]
    pub regularizer: Option<f32>,
}

impl Defense for PositivePerturbationConfig {
    fn budget(&self) -> Budget {
        Budget::of(self.eps, self.step, self.steps, (self.start, self.noise, self.project))
    }

    /// The stacked rows of the mined tuples before and after `ρ`.
    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let model = step.model()?;
        let clean = Clean::of(model, &step.x)?;
        let tr = step.triplets(&clean)?;
        let (rows, rho, movable) = plan(self, step.loss, &tr, step.rng);
        let original = triplets::select_rows(&step.x.clone().without_autodiff(), &rows);
        let pgd = self.pgd(step.state);
        let adversarial = if movable.iter().any(|&m| m) && pgd.step > 0.0 {
            let seed = step.start_seed(&pgd);
            Request::on(Model::Oracle(model), &rho, &pgd)
                .movable(Some(&movable))
                .seed(seed)
                .run(&original)?
        } else {
            original.clone()
        };
        let perturbed = Perturbed {
            triplets: Some(tr),
            dim: clean.dim(),
            clean,
            original,
            adversarial,
        };
        match self.regularizer {
            Some(_) => super::formulations::with_shift(step, &pgd, perturbed),
            None => Ok(Plan::adversarial(perturbed)),
        }
    }

    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        outer(self, step, plan, one(emb)?)
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
        super::formulations::tuple_loss_only("positive-perturbation", loss)
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
    /// Triplet loss: `x₁ + γρ₍₁,₂,₃₎`, away from the positive and toward the negative. Contrastive
    /// loss: `x₁ + γρ₍₁,₂₎` per pair (Appendix F), one copy of the anchor pushed from the positive
    /// and another pulled toward the negative, each with probability `rate`.
    Anchor,
}

/// Eq. 14 over the stacked rows: maximise `1[y_i = y_j] d(x_i + δ, x_j) − 1[y_i ≠ y_k] d(x_i + δ, x_k)`
/// for the target item of each tuple (minimises the negative). With `per_pair`, the rows are
/// `[a, p, n, a′]` and the anchor copies `a` and `a′` take `ρ₍₁,₂₎` against `p` and `n` apart.
pub struct Rho {
    pub layout: TripletLayout,
    pub distance: Distance,
    pub target: PerturbTarget,
    pub per_pair: bool,
}

impl Objective for Rho {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let d = self.distance;
        if self.per_pair {
            let t = self.layout.t;
            let second = emb.clone().narrow(0, 3 * t, t);
            let (a, p, n) = self.layout.split(emb.narrow(0, 0, 3 * t));
            // Each anchor copy's gradient comes from its own pair only.
            return d.rows(second, n).mean() - d.rows(a, p).mean();
        }
        let (a, p, n) = self.layout.split(emb);
        match self.target {
            PerturbTarget::Positive => d.rows(p, a).mean().neg(),
            PerturbTarget::Negative => d.rows(n, a).mean(),
            PerturbTarget::Anchor => (d.rows(a.clone(), p) - d.rows(a, n)).mean().neg(),
        }
    }
}

/// Appendix F's per-pair anchor perturbation: the anchor target under the contrastive loss.
pub fn per_pair(c: &PositivePerturbationConfig, loss: &LossConfig) -> bool {
    c.target == PerturbTarget::Anchor && matches!(loss.unit().tuple(), Some(TupleLoss::Contrastive { .. }))
}

/// The rows to perturb (indices into the batch), the objective and which rows may move: the
/// target third, each tuple with probability `rate` (γ ~ Bernoulli); per pair, both anchor copies
/// drawn independently.
pub fn plan(
    c: &PositivePerturbationConfig,
    loss: &LossConfig,
    tr: &Triplets,
    rng: &mut ChaCha8Rng,
) -> (Rows, Rho, Vec<bool>) {
    let layout = TripletLayout { t: tr.len() };
    let per_pair = per_pair(c, loss);
    let mut rows = TripletLayout::gather_index(tr);
    let third = match c.target {
        PerturbTarget::Anchor => 0,
        PerturbTarget::Positive => 1,
        PerturbTarget::Negative => 2,
    };
    let blocks: &[usize] = if per_pair {
        &[0, 3]
    } else {
        std::slice::from_ref(&third)
    };
    if per_pair {
        rows = Rows::concat(&[&rows, &tr.anchor_rows()]);
    }
    let mut movable = vec![false; rows.len()];
    for &block in blocks {
        for k in 0..layout.t {
            movable[block * layout.t + k] = rng.random::<f32>() < c.rate;
        }
    }
    let rho = Rho {
        layout,
        distance: loss.distance(),
        target: c.target,
        per_pair,
    };
    (rows, rho, movable)
}

/// The configured tuple loss (triplet or contrastive) on the stacked rows, per pair for the
/// contrastive anchor target, plus formulation 3's regulariser when asked.
fn outer(c: &PositivePerturbationConfig, step: &Outer, plan: &Plan, emb: Tensor<2>) -> Result<DefendedLoss> {
    let (loss_cfg, pert) = (step.loss, &plan.perturbed);
    let (emb, reg) = match c.regularizer {
        Some(lambda) => {
            let (e, r) = super::formulations::regularised(plan, emb, step, lambda)?;
            (e, Some(r))
        }
        None => (emb, None),
    };
    let (pos_margin, neg_margin) = match loss_cfg.unit().tuple() {
        Some(TupleLoss::Contrastive { pos_margin, neg_margin }) if per_pair(c, loss_cfg) => (pos_margin, neg_margin),
        _ => return triplets::triplet_outcome(loss_cfg, pert, emb, reg),
    };
    let t = pert.triplets.as_ref().map_or(0, Triplets::len);
    let second = emb.clone().narrow(0, 3 * t, t);
    let (a, p, n) = TripletLayout { t }.split(emb.clone().narrow(0, 0, 3 * t));
    let distance = triplet_params(loss_cfg).0;
    let main = crate::loss::contrastive::contrastive_pairs(a, p, second, n, distance, pos_margin, neg_margin);
    triplets::tuple_outcome(loss_cfg, pert, emb.narrow(0, 0, 3 * t), main, reg)
}
