//! CA-TRIDE (Tian et al., ICML'24; seed 001): collapse-aware triplet decoupling. Mini-batches
//! alternate, starting with CAP, between candidate perturbation (CAP: p and n move, anchors clean;
//! `L_CAP = max(−C, 0)`, its Eq. 10) and anchor perturbation (ANP: only anchors move;
//! `L_ANP = max(−C + Δ_TR, 0)`, Eq. 11–12). `C` is the collapseness of Eq. 5–6; PGD stops once the
//! loss vanishes. Training: `L_T(Ã, P, N) + L_TR` after ANP (Eq. 13–14), `L_T(A, P̃, Ñ)` after CAP.

use super::triplets::{self, TripletLayout, TripletPlan, perturb_triplets};
use super::unit::{Budget, Clean, DefendedLoss, Defense, DefenseState, Inner, Outer, Plan, Start, one};
use crate::attack::budget::Pgd;
use crate::attack::objective::{Objective, StopRule};
pub use crate::eval::diagnostics::{collapseness, weighted_mean};
use crate::loss::LossConfig;
use crate::loss::distance::Distance;
use crate::loss::miner::{Miner, Mining};
use anyhow::Result;
use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// CA-TRIDE's parameters (`[defense] kind = "ca-tride"`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CaTrideConfig {
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
    /// Attention factor λ of collapseness (CUB 10, CARS 9.5, SOP 2).
    #[serde(default = "ten")]
    pub lambda: f32,
    /// γ and β_TR of the top-rank triplet L_TR.
    #[serde(default = "half")]
    pub gamma_tr: f32,
    #[serde(default = "f0_04")]
    pub beta_tr: f32,
    #[serde(default)]
    pub mode: TrideMode,
    #[serde(default)]
    pub adversary: Adversary,
    /// PGD step `α·epoch/epochs` (the reference code's progressive step; zero in epoch 1).
    #[serde(default = "crate::field::yes")]
    pub progressive: bool,
    /// Semihard mining with an epoch-wise margin instead of the loss's miner: `paper` (or
    /// `true`) is Eq. 32's `η₀(1 − (e/2E)²)`, `reference` the reference code's
    /// `η₀(1 − e/2E)²`, `off` (or `false`) the loss's own miner.
    #[serde(default)]
    pub margin_schedule: MarginSchedule,
    /// Weight *farther* pairs more, as the reference code does (`exp(λ(d − max d))`), instead
    /// of the paper's anchor-proximity weights (Eq. 6).
    #[serde(default)]
    pub code_weighting: bool,
    /// ANP's loss as the reference code writes it, `[w̄_ap − w̄_an]_+ + γ·[d̄(Ã, N_υ) −
    /// d̄(Ã, A₀)]_+` with `γ = e^{−[w̄_an − w̄_ap]_+}` (collapse held back, the anchor pushed at
    /// least as far as its closest negatives), instead of the paper's Eq. 11–12.
    #[serde(default)]
    pub code_anp: bool,
    /// `L_TR` with the reference code's hinge `γ·[·]_+` instead of Eq. 13 as written.
    #[serde(default)]
    pub tr_hinge: bool,
    /// The top-rank preservation: Δ_TR in ANP's loss (Eq. 11–12) and L_TR in training (Eq. 14).
    /// `false` is Table 4's "w/o TPR" (`gamma_tr = 0` alone is its "w/o L_TR").
    #[serde(default = "crate::field::yes")]
    pub tpr: bool,
    /// The collapse-aware adversaries of Eq. 8: losses clipped at 0 (C kept ≤ 0) and PGD stopped
    /// once there. `false` gives §4.3's naive CAP / ANP / TRIDE, unclipped and run for every
    /// step (they collapse training: R@1 4.4 / 7.8 / 0.8 on CUB in the paper).
    #[serde(default = "crate::field::yes")]
    pub collapse_aware: bool,
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

impl Defense for CaTrideConfig {
    fn budget(&self) -> Budget {
        Budget::of(self.eps, self.step, self.steps, (self.start, self.noise, self.project))
    }

    /// The progressive step when on.
    fn pgd(&self, state: &DefenseState) -> Pgd {
        Pgd {
            step: self.step_at(state),
            ..self.budget().pgd()
        }
    }

    fn triplet_based(&self) -> bool {
        true
    }

    fn scheduled(&self) -> bool {
        self.progressive || self.margin_schedule != MarginSchedule::Off
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let clean = Clean::of(step.model()?, &step.x)?;
        let plan = plan(self, step.loss, &clean, step.labels, step.state, step.rng)?;
        perturb_triplets(step, clean, plan, &self.pgd(step.state)).map(Plan::adversarial)
    }

    /// `L_T(A, P̃, Ñ)` after CAP; after ANP, plus `L_TR` (Eq. 13–14).
    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        if is_cap(self.mode, step.state) {
            triplets::adversarial_outer(plan, emb, step)
        } else {
            anp_outer(self, step, plan, one(emb)?)
        }
    }

    fn validate(&self, _loss: &LossConfig) -> Result<()> {
        anyhow::ensure!(
            self.lambda.is_finite() && self.lambda > 0.0,
            "defense.lambda must be > 0"
        );
        anyhow::ensure!(
            self.gamma_tr >= 0.0 && self.beta_tr >= 0.0,
            "defense.gamma_tr and beta_tr must be ≥ 0"
        );
        Ok(())
    }
}

impl CaTrideConfig {
    /// The PGD step of this epoch: the progressive step when on.
    pub fn step_at(&self, state: &DefenseState) -> f32 {
        if self.progressive {
            progressive_step(self.step, state.epoch, state.epochs)
        } else {
            self.step
        }
    }
}

/// Which perturbations a CA-TRIDE run uses (the paper's Table 3 ablations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TrideMode {
    /// CAP and ANP alternating per mini-batch, CAP first.
    #[default]
    Tride,
    CapOnly,
    AnpOnly,
}

/// What the adversary drives up: collapseness `C` (CA) or plain mean hardness `H` (Sec. 4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Adversary {
    #[default]
    Collapseness,
    Hardness,
}

/// Whether this step perturbs candidates (`true`) or anchors.
pub fn is_cap(mode: TrideMode, state: &DefenseState) -> bool {
    match mode {
        TrideMode::Tride => state.steps_done.is_multiple_of(2),
        TrideMode::CapOnly => true,
        TrideMode::AnpOnly => false,
    }
}

/// The epoch-wise semihard mining margin (`defense.margin_schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MarginSchedule {
    /// The loss's own miner and margin.
    Off,
    /// App. C, Eq. 32: `η₀(1 − (e/2E)²)`, 0.2 → 0.15 over training.
    #[default]
    Paper,
    /// The reference code's `η₀(1 − e/2E)²`, 0.2 → 0.05.
    Reference,
}

impl<'de> Deserialize<'de> for MarginSchedule {
    /// `true` (the paper's), `false`, or a name: configs written before the schedule had
    /// variants keep parsing.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Name(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Self::Paper),
            Raw::Bool(false) => Ok(Self::Off),
            Raw::Name(n) => match n.as_str() {
                "off" => Ok(Self::Off),
                "paper" => Ok(Self::Paper),
                "reference" => Ok(Self::Reference),
                _ => Err(serde::de::Error::custom(format!(
                    "margin_schedule = {n:?}: expected \"paper\" (Eq. 32), \"reference\", \"off\", true or false"
                ))),
            },
        }
    }
}

/// The semihard margin at epoch `epoch` of `epochs` (0-based), from base `η₀`; `None` when off.
pub fn margin_schedule(schedule: MarginSchedule, base: f32, epoch: usize, epochs: usize) -> Option<f32> {
    let r = epoch as f32 / (2.0 * epochs.max(1) as f32);
    match schedule {
        MarginSchedule::Off => None,
        MarginSchedule::Paper => Some(base * (1.0 - r * r)),
        MarginSchedule::Reference => Some(base * (1.0 - r) * (1.0 - r)),
    }
}

/// The progressive PGD step `α·e/E` (zero in the first epoch, as the reference code does).
pub fn progressive_step(step: f32, epoch: usize, epochs: usize) -> f32 {
    step * epoch as f32 / epochs.max(1) as f32
}

/// Mean of the smaller half of `d` (the "top-ranked" half).
pub fn top_half_mean(d: Tensor<1>) -> Tensor<1> {
    let n = d.dims()[0];
    let k = n.div_ceil(2).max(1);
    // The order comes from a detached sort on the device (no host round trip per PGD step); the
    // gradient flows through `select` to the chosen entries only.
    let (_, order) = d.clone().detach().sort_with_indices(0);
    d.select(0, order.narrow(0, 0, k.min(n))).mean()
}

/// The CAP / ANP objective over stacked `[a, p, n]` rows.
pub struct TrideObjective {
    pub layout: TripletLayout,
    pub distance: Distance,
    pub cap: bool,
    pub adversary: Adversary,
    pub lambda: f32,
    /// ANP's loss as the reference code writes it (see `DefenseConfig::CaTride::code_anp`).
    pub code_anp: bool,
    /// Clean anchor embeddings `A₀` (for Δ_TR).
    pub clean_anchor: Tensor<2>,
    /// Δ_TR in ANP's loss ([`CaTrideConfig::tpr`]).
    pub top_rank: bool,
    /// Clip at 0 and stop there ([`CaTrideConfig::collapse_aware`]).
    pub collapse_aware: bool,
}

impl TrideObjective {
    fn c(&self, dap: Tensor<1>, dan: Tensor<1>) -> Tensor<1> {
        match self.adversary {
            Adversary::Collapseness => collapseness(dap, dan, self.lambda),
            Adversary::Hardness => (dap - dan).mean(),
        }
    }
}

impl Objective for TrideObjective {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (a, p, n) = self.layout.split(emb);
        let dap = self.distance.rows(a.clone(), p);
        let dan = self.distance.rows(a.clone(), n);
        let c = self.c(dap, dan.clone());
        // The collapse-aware clip of Eq. 8; the naive adversaries go on past it.
        let clip = |x: Tensor<1>| if self.collapse_aware { relu(x) } else { x };
        if self.cap || (!self.top_rank && !self.code_anp) {
            return clip(c.neg());
        }
        if self.code_anp && !self.top_rank {
            return clip(c);
        }
        let shift = self.distance.rows(a, self.clean_anchor.clone()).mean();
        if self.code_anp {
            // The reference code: [C]_+ + γ·[d(Ã, N_υ) − d(Ã, A₀)]_+, γ = e^{−[−C]_+} a weight.
            let gamma = relu(c.clone().neg().detach()).neg().exp();
            return clip(c) + gamma * clip(top_half_mean(dan) - shift);
        }
        // Δ_TR = e^{max(C,0)} (d(Ã, N_υ) − d(Ã, A₀)), the exponential factor a constant weight.
        let factor = relu(c.clone().detach()).exp();
        let delta_tr = factor * (top_half_mean(dan) - shift);
        clip(c.neg() + delta_tr)
    }

    /// The collapse-aware early stop: once the clipped loss is (near) zero, the triplet is
    /// adversarial enough.
    fn stop_rule(&self) -> Option<StopRule> {
        self.collapse_aware.then_some(StopRule::Below(1e-5))
    }
}

/// `L_TR = γ(d(A, P_υ) − d(A, N_υ) + β_TR)` (Eq. 13, no hinge) on the training-mode
/// embeddings; `hinge` gives the reference code's `γ·[·]_+`.
pub fn top_rank_triplet(
    a: Tensor<2>,
    p: Tensor<2>,
    n: Tensor<2>,
    d: Distance,
    gamma: f32,
    beta: f32,
    hinge: bool,
) -> Tensor<1> {
    let dap = d.rows(a.clone(), p);
    let dan = d.rows(a, n);
    let v = top_half_mean(dap) - top_half_mean(dan) + beta;
    if hinge { relu(v) } else { v }.mul_scalar(gamma)
}

/// CA-TRIDE's inner maximisation for one batch: triplets mined on the clean embeddings (by the
/// semihard margin schedule of Eq. 32 when on), and CAP (p, n move) or ANP (the anchor moves)
/// by the mode's alternation.
fn plan(
    c: &CaTrideConfig,
    loss_cfg: &LossConfig,
    clean: &Clean,
    labels: &[u32],
    state: &DefenseState,
    rng: &mut ChaCha8Rng,
) -> Result<TripletPlan> {
    let (distance, base_margin) = triplets::triplet_params(loss_cfg);
    let tr = match margin_schedule(c.margin_schedule, base_margin, state.epoch, state.epochs) {
        Some(margin) => {
            let semihard = Mining {
                miner: Miner::Semihard,
                margin,
                ..Mining::default()
            };
            clean.mine_with(&semihard, distance, labels, rng)?
        }
        None => clean.mine(loss_cfg, labels, rng)?,
    };
    let layout = TripletLayout { t: tr.len() };
    let cap = is_cap(c.mode, state);
    let movable = if cap {
        layout.movable(false, true, true)
    } else {
        layout.movable(true, false, false)
    };
    let obj = TrideObjective {
        layout,
        distance,
        cap,
        adversary: c.adversary,
        lambda: if c.code_weighting { -c.lambda } else { c.lambda },
        code_anp: c.code_anp,
        clean_anchor: clean.rows(&tr.anchor),
        top_rank: c.tpr,
        collapse_aware: c.collapse_aware,
    };
    Ok(TripletPlan {
        triplets: tr,
        objective: Box::new(obj),
        movable,
    })
}

/// The outer loss after ANP: the triplet loss on the perturbed triplets plus the top-rank
/// triplet term `L_TR` (Eq. 13), which "w/o TPR" drops.
fn anp_outer(c: &CaTrideConfig, step: &Outer, plan: &Plan, emb: Tensor<2>) -> Result<DefendedLoss> {
    let (loss_cfg, pert) = (step.loss, &plan.perturbed);
    if !c.tpr {
        return triplets::triplet_outcome(loss_cfg, pert, emb, None);
    }
    let (a, p, n) = TripletLayout { t: emb.dims()[0] / 3 }.split(emb.clone());
    let d = triplets::triplet_params(loss_cfg).0;
    let l_tr = top_rank_triplet(a, p, n, d, c.gamma_tr, c.beta_tr, c.tr_hinge);
    triplets::triplet_outcome(loss_cfg, pert, emb, Some(l_tr))
}

#[cfg(test)]
mod tests;
