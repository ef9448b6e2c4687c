//! MDProp (Singh et al., ACML'23; seed 004, Algorithm 1): besides the clean batch (batch-norm
//! set 0), each extra distribution k = 1…K−1 is generated from the batch with its own BN set —
//! STAX, MTAX or unadversarial examples ([`super::generated`]) — and the loss is
//! `L(θ_n, θ_b¹, X) + Σ_k L(θ_n, θ_bᵏ, Xᵏ)` (Eq. 5). Inference uses set 0 only (`rdml eval
//! --bn-set k` for §5's ablation). Target features come from the clean set, the perturbed ones
//! from set k (Sec. 3.1.1). `separate_bn = false` runs every distribution through set 0: the
//! paper's shared-BN "AT" baseline (STAX alone) and its MTAX-without-separate-BNs ablation.

use super::generated::{Generated, UxMemory, UxTargets, pick_targets, ux_objective};
use super::memory::{Memory, Nothing};
use super::unit::{Budget, Clean, DefendedLoss, Defense, Perturbed, Step};
use crate::attack::budget::Pgd;
use crate::attack::engine::Request;
use crate::attack::objective::Objective;
use crate::attack::objective::targets::TowardTargets;
use crate::eval::diagnostics;
use crate::loss::{self, LossConfig};
use crate::model::EmbeddingNet;
use anyhow::{Context as _, Result};
use burn::tensor::Tensor;
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
    /// `false`: every distribution through the clean set 0, in one forward of the concatenated
    /// batches (BN statistics of the mixture, as a network without separate BNs sees them).
    #[serde(default = "yes")]
    pub separate_bn: bool,
}

fn yes() -> bool {
    true
}

impl Defense for MdpropConfig {
    fn budget(&self) -> Budget {
        Budget {
            eps: self.eps,
            step: self.step,
            steps: self.steps,
        }
    }

    fn validate(&self, _loss: &LossConfig) -> Result<()> {
        anyhow::ensure!(
            !self.distributions.is_empty(),
            "defense.distributions must list at least one of stax, mtax, ux"
        );
        for g in &self.distributions {
            let (t, _) = g.targets();
            anyhow::ensure!(t != Some(0), "defense.distributions: targets must be ≥ 1");
        }
        Ok(())
    }

    fn distributions(&self) -> Vec<Generated> {
        self.distributions.clone()
    }

    /// One set per distribution, or the clean set alone when they share it.
    fn bn_sets(&self) -> usize {
        if self.separate_bn {
            1 + self.distributions.len()
        } else {
            1
        }
    }

    fn memory(&self) -> Box<dyn Memory> {
        match self.distributions.iter().any(|g| matches!(g, Generated::Ux { .. })) {
            true => Box::new(UxMemory::default()),
            false => Box::new(Nothing),
        }
    }

    fn perturb(&self, step: &mut Step) -> Result<Perturbed> {
        self.propagation(step).perturb(step)
    }

    fn loss(&self, step: &mut Step) -> Result<DefendedLoss> {
        self.propagation(step).loss(step)
    }
}

impl MdpropConfig {
    fn propagation(&self, step: &Step) -> Propagation {
        Propagation {
            pgd: self.pgd(step.state),
            distributions: self.distributions.clone(),
            separate_bn: self.separate_bn,
        }
    }
}

/// What MDProp and AdvProp-D generate: the distributions under one budget, each through its own
/// BN set or all through the clean set 0.
pub struct Propagation {
    pub pgd: Pgd,
    pub distributions: Vec<Generated>,
    pub separate_bn: bool,
}

impl Propagation {
    /// The BN set distribution `k` (0-based among the generated ones) trains and is generated
    /// with.
    fn bn_set(&self, k: usize) -> usize {
        if self.separate_bn { k + 1 } else { 0 }
    }

    /// The generated batches, one per distribution, on the plain device. STAX and MTAX targets
    /// are batch items of other classes (Eq. 3's `S_B`); UX targets come from the training-set
    /// bank.
    pub fn generate(
        &self,
        net: &EmbeddingNet,
        x: &Tensor<4>,
        clean: &Clean,
        labels: &[u32],
        ux: Option<UxTargets>,
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<Tensor<4>>> {
        let x = x.clone().without_autodiff();
        let mut out = vec![];
        for (k, g) in self.distributions.iter().enumerate() {
            let objective: Box<dyn Objective> = match g.targets() {
                (t, true) => {
                    let ux = ux.context(
                        "UX targets come from the training set's features, which only `rdml train` supplies",
                    )?;
                    ux_objective(ux, labels, t, rng, &x.device())?
                }
                (t, false) => Box::new(TowardTargets {
                    targets: pick_targets(labels, t.unwrap_or(1), false, rng)
                        .iter()
                        .map(|idx| clean.rows(idx))
                        .collect(),
                }),
            };
            out.push(
                Request::new(net, objective.as_ref(), &self.pgd)
                    .bn_set(self.bn_set(k))
                    .run(&x)?,
            );
        }
        Ok(out)
    }

    /// The first generated distribution (the others differ only in their objective).
    pub fn perturb(&self, step: &mut Step) -> Result<Perturbed> {
        let clean = Clean::of(step.net, &step.x);
        let x = step.x.clone().without_autodiff();
        let generated = self.generate(step.net, &x, &clean, step.labels, ux_targets(step), step.rng)?;
        let adversarial = generated.into_iter().next().unwrap_or_else(|| x.clone());
        Ok(Perturbed {
            triplets: None,
            dim: clean.dim(),
            clean,
            original: x,
            adversarial,
        })
    }

    /// Eq. 5 with the configured loss, each distribution through its own BN set in training mode
    /// (or, without separate BNs, all through set 0 in one forward).
    pub fn loss(&self, step: &mut Step) -> Result<DefendedLoss> {
        let (net, labels) = (step.net, step.labels);
        let x = step.x.clone();
        let clean = Clean::of(net, &x);
        let generated = self.generate(net, &x, &clean, labels, ux_targets(step), step.rng)?;
        let n = labels.len();
        let embeddings: Vec<Tensor<2>> = if !self.separate_bn {
            let all = std::iter::once(x)
                .chain(generated.into_iter().map(|g| g.autodiff()))
                .collect::<Vec<_>>();
            let k = all.len();
            let e = net.forward_set(Tensor::cat(all, 0), 0);
            (0..k).map(|i| e.clone().narrow(0, i * n, n)).collect()
        } else {
            std::iter::once(net.forward_set(x, 0))
                .chain(
                    generated
                        .into_iter()
                        .enumerate()
                        .map(|(k, xk)| net.forward_set(xk.autodiff(), self.bn_set(k))),
                )
                .collect()
        };
        let mut embeddings = embeddings.into_iter();
        let emb = embeddings.next().context("MDProp: no clean embeddings")?;
        let tr = diagnostics::spc2_random_triplets(labels);
        let diag = diagnostics::batch_on_device(&emb, &tr, step.loss.distance(), None);
        let mut total = loss::compute(step.loss, emb, labels, step.params, step.rng)?.loss;
        let mut adv_total = Tensor::<1>::zeros([1], &total.device().without_autodiff());
        for e in embeddings {
            let l = loss::compute(step.loss, e, labels, step.params, step.rng)?.loss;
            adv_total = adv_total + l.clone().detach().without_autodiff();
            total = total + l;
        }
        Ok(DefendedLoss {
            loss: total,
            adv_loss: adv_total.div_scalar(self.distributions.len().max(1) as f64),
            diag,
        })
    }
}

/// The UX targets of a step: the bank its memory holds, and the batch items' positions.
fn ux_targets<'a>(step: &Step<'a>) -> Option<UxTargets<'a>> {
    let bank = step.memory.get::<UxMemory>()?.bank.as_ref()?;
    Some(UxTargets {
        bank,
        items: step.items,
    })
}
