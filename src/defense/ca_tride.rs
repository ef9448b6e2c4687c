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

/// `d_ω` of Eq. 6: the attention-weighted mean `Σ w d / Σ w`, `w = exp(−λ(d − min d))` (closer
/// pairs weigh more). `lambda < 0` gives the reference code's `exp(|λ|(d − max d))`. The weights
/// carry gradient, as in Eq. 6–7 and the reference code; only the shift by the extreme (which
/// cancels in the ratio) is held constant, for numerical range.
pub fn weighted_mean(d: Tensor<1>, lambda: f32) -> Tensor<1> {
    let w = d.clone().mul_scalar(-lambda);
    let w = (w.clone() - w.detach().max()).exp();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_schedules_by_hand() {
        let m = |s, e| margin_schedule(s, 0.2, e, 10).unwrap();
        // Eq. 32 at the last epoch (e/2E → 1/2): 0.2·(1 − 1/4) = 0.15; the reference's 0.05.
        assert!((m(MarginSchedule::Paper, 10) - 0.15).abs() < 1e-6);
        assert!((m(MarginSchedule::Reference, 10) - 0.05).abs() < 1e-6);
        assert!((m(MarginSchedule::Paper, 5) - 0.2 * (1.0 - 0.0625)).abs() < 1e-6);
        assert_eq!(margin_schedule(MarginSchedule::Off, 0.2, 3, 10), None);
        #[derive(Deserialize)]
        struct T {
            m: MarginSchedule,
        }
        let p = |t: &str| toml::from_str::<T>(t).map(|t| t.m);
        assert_eq!(p("m = true").unwrap(), MarginSchedule::Paper);
        assert_eq!(p("m = false").unwrap(), MarginSchedule::Off);
        assert_eq!(p("m = \"reference\"").unwrap(), MarginSchedule::Reference);
        assert!(p("m = \"eq32\"").is_err());
    }

    fn dev() -> burn::tensor::Device {
        crate::default_device().autodiff()
    }

    #[test]
    fn top_rank_triplet_has_no_hinge_unless_asked() {
        // d(A,P) = 0, d(A,N) = 2 (Euclidean): Eq. 13 gives γ(0 − 2 + 0.04) = 0.5·(−1.96).
        let a = Tensor::<2>::from_floats([[0.0, 0.0]], &dev());
        let n = Tensor::<2>::from_floats([[2.0, 0.0]], &dev());
        let l = |h| {
            top_rank_triplet(a.clone(), a.clone(), n.clone(), Distance::Euclidean, 0.5, 0.04, h).into_scalar::<f32>()
        };
        assert!((l(false) + 0.98).abs() < 1e-5, "{}", l(false));
        assert_eq!(l(true), 0.0);
    }

    #[test]
    fn collapseness_weights_carry_gradient() {
        // f(d) = Σ w d / Σ w, w = e^{−λ d}: ∂f/∂d_i = w_i (1 − λ(d_i − f)) / Σ w. With the
        // weights detached it would be w_i / Σ w; compare with central differences.
        let (lambda, d) = (2.0f32, [0.3f32, 0.7, 1.1]);
        let f = |d: &[f32]| {
            let w: Vec<f32> = d.iter().map(|x| (-lambda * x).exp()).collect();
            w.iter().zip(d).map(|(w, x)| w * x).sum::<f32>() / w.iter().sum::<f32>()
        };
        let t = Tensor::<1>::from_floats(d, &dev()).require_grad();
        let g = weighted_mean(t.clone(), lambda).backward();
        let grad = t.grad(&g).unwrap().into_data().try_into_vec::<f32>().unwrap();
        for i in 0..3 {
            let (mut hi, mut lo) = (d, d);
            hi[i] += 1e-3;
            lo[i] -= 1e-3;
            let num = (f(&hi) - f(&lo)) / 2e-3;
            assert!(
                (grad[i] - num).abs() < 1e-3,
                "∂/∂d{i}: autodiff {} vs numeric {num}",
                grad[i]
            );
        }
    }
}
