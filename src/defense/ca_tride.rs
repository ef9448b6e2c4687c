//! CA-TRIDE (Tian et al., ICML'24; seed 001): collapse-aware triplet decoupling. Mini-batches
//! alternate, starting with CAP, between candidate perturbation (CAP: p and n move, anchors clean;
//! `L_CAP = max(−C, 0)`, its Eq. 10) and anchor perturbation (ANP: only anchors move;
//! `L_ANP = max(−C + Δ_TR, 0)`, Eq. 11–12). `C` is the collapseness of Eq. 5–6; PGD stops once the
//! loss vanishes. Training: `L_T(Ã, P, N) + L_TR` after ANP (Eq. 13–14), `L_T(A, P̃, Ñ)` after CAP.

use super::{DefenseState, TripletLayout};
use crate::attack::engine::Objective;
use crate::loss::distance::Distance;
use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use serde::{Deserialize, Serialize};

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

/// The epoch-wise semihard mining margin `0.2·(1 − e/(2E))²` (0.2 → 0.05 over training).
pub fn margin_schedule(base: f32, epoch: usize, epochs: usize) -> f32 {
    let r = 1.0 - epoch as f32 / (2.0 * epochs.max(1) as f32);
    base * r * r
}

/// The progressive PGD step `α·e/E` (zero in the first epoch, as the reference code does).
pub fn progressive_step(step: f32, epoch: usize, epochs: usize) -> f32 {
    step * epoch as f32 / epochs.max(1) as f32
}

/// `d_ω` of Eq. 6: the attention-weighted mean `Σ w d / Σ w`, `w = exp(−λ(d − min d))` (closer
/// pairs weigh more). `lambda < 0` gives the reference code's `exp(|λ|(d − max d))`.
pub fn weighted_mean(d: Tensor<1>, lambda: f32) -> Tensor<1> {
    let w = d.clone().detach().mul_scalar(-lambda);
    let w = (w.clone() - w.max()).exp();
    (w.clone() * d).sum() / w.sum()
}

/// Collapseness `C = d_ω(A, P) − d_ω(A, N)` (Eq. 5) of per-triplet distances.
pub fn collapseness(dap: Tensor<1>, dan: Tensor<1>, lambda: f32) -> Tensor<1> {
    weighted_mean(dap, lambda) - weighted_mean(dan, lambda)
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
        if self.cap {
            return relu(c.neg());
        }
        let shift = self.distance.rows(a, self.clean_anchor.clone()).mean();
        if self.code_anp {
            // The reference code: [C]_+ + γ·[d(Ã, N_υ) − d(Ã, A₀)]_+, γ = e^{−[−C]_+} a weight.
            let gamma = relu(c.clone().neg().detach()).neg().exp();
            return relu(c) + gamma * relu(top_half_mean(dan) - shift);
        }
        // Δ_TR = e^{max(C,0)} (d(Ã, N_υ) − d(Ã, A₀)), the exponential factor a constant weight.
        let factor = relu(c.clone().detach()).exp();
        let delta_tr = factor * (top_half_mean(dan) - shift);
        relu(c.neg() + delta_tr)
    }

    fn done(&self, _emb: &Tensor<2>, prev_loss: Option<f32>, _step: usize) -> bool {
        prev_loss.is_some_and(|l| l < 1e-5)
    }
}

/// `L_TR = γ·[d(A, P_υ) − d(A, N_υ) + β_TR]_+` (Eq. 13) on the training-mode embeddings.
pub fn top_rank_triplet(a: Tensor<2>, p: Tensor<2>, n: Tensor<2>, d: Distance, gamma: f32, beta: f32) -> Tensor<1> {
    let dap = d.rows(a.clone(), p);
    let dan = d.rows(a, n);
    relu(top_half_mean(dap) - top_half_mean(dan) + beta).mul_scalar(gamma)
}
