//! MDProp (Singh et al., ACML'23; seed 004, Algorithm 1) and AdvProp-D (its Sec. 3.1.4): besides the
//! clean batch (batch-norm set 0), each extra distribution k = 1…K−1 is generated from the batch
//! with its own BN set — STAX (one target of another class), MTAX (T targets of other classes,
//! Eq. 3) or unadversarial examples (targets of the item's own class, Eq. 8) — and the loss is
//! `L(θ_n, θ_b¹, X) + Σ_k L(θ_n, θ_bᵏ, Xᵏ)` (Eq. 5). Inference uses set 0 only. Target features
//! come from the clean set, the perturbed ones from set k (Sec. 3.1.1).

use super::{DefendedLoss, DefenseConfig, diagnostics};
use crate::attack::engine;
use crate::attack::objective::targets::TowardTargets;
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::tensor::Tensor;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// MDProp's parameters (`[defense] kind = "mdprop"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MdpropConfig {
    pub eps: f32,
    pub step: f32,
    pub steps: usize,
    /// The generated distributions, each trained through its own BN set.
    pub distributions: Vec<Generated>,
}

impl super::config::DefenseParams for MdpropConfig {
    fn budget(&self) -> (f32, f32, usize) {
        (self.eps, self.step, self.steps)
    }
    fn validate(&self, _loss: &LossConfig) -> Result<()> {
        anyhow::ensure!(
            !self.distributions.is_empty(),
            "defense.distributions must list at least one of stax, mtax, ux"
        );
        for g in &self.distributions {
            anyhow::ensure!(g.targets().0 >= 1, "defense.distributions: targets must be ≥ 1");
        }
        Ok(())
    }
}

/// One generated distribution of MDProp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Generated {
    /// Single-targeted adversarial examples.
    Stax,
    /// Multi-targeted adversarial examples with `targets` targets (MDProp: 5).
    Mtax { targets: usize },
    /// Unadversarial examples toward `targets` same-class items.
    Ux { targets: usize },
}

impl Generated {
    /// Number of targets and whether they share the item's class.
    pub fn targets(self) -> (usize, bool) {
        match self {
            Generated::Stax => (1, false),
            Generated::Mtax { targets } => (targets, false),
            Generated::Ux { targets } => (targets, true),
        }
    }
}

/// For each of `t` rounds, one batch position per item: another class (`own = false`) or the
/// same class without the item itself (`own = true`); the item itself when none exists.
pub fn pick_targets(labels: &[u32], t: usize, own: bool, rng: &mut ChaCha8Rng) -> Vec<Vec<usize>> {
    let n = labels.len();
    (0..t)
        .map(|_| {
            (0..n)
                .map(|i| {
                    let pool: Vec<usize> = (0..n).filter(|&j| j != i && (labels[j] == labels[i]) == own).collect();
                    if pool.is_empty() {
                        i
                    } else {
                        pool[rng.random_range(0..pool.len())]
                    }
                })
                .collect()
        })
        .collect()
}

/// The generated batches, one per distribution, on the plain device.
pub fn generate(
    cfg: &DefenseConfig,
    distributions: &[Generated],
    net: &EmbeddingNet,
    x: &Tensor<4>,
    (clean, dim): (&[f32], usize),
    labels: &[u32],
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Tensor<4>>> {
    let x = x.clone().without_autodiff();
    let mut out = vec![];
    for (k, g) in distributions.iter().enumerate() {
        let (t, own) = g.targets();
        let targets = pick_targets(labels, t, own, rng)
            .iter()
            .map(|idx| super::host_rows(clean, idx, dim, &x.device()))
            .collect();
        out.push(engine::attack(
            net,
            k + 1,
            &x,
            None,
            &TowardTargets { targets },
            &cfg.pgd(),
            0,
        )?);
    }
    Ok(out)
}

/// Eq. 5 with the configured loss, each distribution through its own BN set in training mode.
#[allow(clippy::too_many_arguments)]
pub fn loss(
    cfg: &DefenseConfig,
    distributions: &[Generated],
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    params: &LossParams,
    x: Tensor<4>,
    labels: &[u32],
    rng: &mut ChaCha8Rng,
) -> Result<DefendedLoss> {
    let (clean, dim) = super::clean_host(net, &x)?;
    let generated = generate(cfg, distributions, net, &x, (&clean, dim), labels, rng)?;
    let emb = net.forward_set(x, 0);
    let host = crate::host::read(&emb)?;
    let mut total = loss::compute(loss_cfg, emb, labels, params, rng)?.loss;
    let mut adv_total = 0.0;
    for (k, xk) in generated.into_iter().enumerate() {
        let l = loss::compute(loss_cfg, net.forward_set(xk.autodiff(), k + 1), labels, params, rng)?.loss;
        adv_total += l.clone().into_scalar::<f32>();
        total = total + l;
    }
    let tr = diagnostics::spc2_random_triplets(labels);
    let diag = diagnostics::batch(&host, dim, &tr, loss_cfg.distance(), None)?;
    Ok(DefendedLoss {
        loss: total,
        adv_loss: adv_total / distributions.len().max(1) as f32,
        diag,
    })
}
