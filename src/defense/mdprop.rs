//! MDProp (Singh et al., ACML'23; seed 004, Algorithm 1): besides the clean batch (batch-norm
//! set 0), each extra distribution k = 1…K−1 is generated from the batch with its own BN set —
//! STAX, MTAX or unadversarial examples ([`super::generated`]) — and the loss is
//! `L(θ_n, θ_b¹, X) + Σ_k L(θ_n, θ_bᵏ, Xᵏ)` (Eq. 5). Inference uses set 0 only (`rdml eval
//! --bn-set k` for §5's ablation). Target features come from the clean set, the perturbed ones
//! from set k (Sec. 3.1.1). `separate_bn = false` runs every distribution through set 0: the
//! paper's shared-BN "AT" baseline (STAX alone) and its MTAX-without-separate-BNs ablation.

use super::generated::{Generated, UxMemory, UxTargets, pick_targets, ux_objective};
use super::memory::{Memory, Nothing};
use super::unit::{Budget, Clean, DefendedLoss, Defense, Forward, Inner, Outer, Perturbed, Plan, Start};
use crate::attack::budget::Pgd;
use crate::attack::engine::{Model, Request};
use crate::attack::objective::Objective;
use crate::attack::objective::targets::TowardTargets;
use crate::eval::diagnostics;
use crate::loss::{self, LossConfig};
use anyhow::{Context as _, Result};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// MDProp's parameters (`[defense] kind = "mdprop"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MdpropConfig {
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
    /// The generated distributions, each trained through its own BN set.
    pub distributions: Vec<Generated>,
    /// `false`: every distribution through the clean set 0, in one forward of the concatenated
    /// batches (BN statistics of the mixture, as a network without separate BNs sees them).
    #[serde(default = "crate::field::yes")]
    pub separate_bn: bool,
}

impl Defense for MdpropConfig {
    fn budget(&self) -> Budget {
        Budget::of(self.eps, self.step, self.steps, (self.start, self.noise, self.project))
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

    fn outer_is_the_loss(&self) -> bool {
        true
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

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        self.propagation(step.state).inner(step)
    }

    fn outer(&self, _plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        self.propagation(step.state).outer(emb, step)
    }
}

impl MdpropConfig {
    fn propagation(&self, state: &super::unit::DefenseState) -> Propagation {
        Propagation {
            pgd: self.pgd(state),
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
    /// bank. Distribution `k` is generated through its own BN set's oracle.
    pub fn generate(&self, step: &mut Inner, clean: &Clean) -> Result<Vec<Tensor<4>>> {
        let x = step.x.clone().without_autodiff();
        let labels = step.labels;
        let mut out = vec![];
        for (k, g) in self.distributions.iter().enumerate() {
            let objective: Box<dyn Objective> = match g.targets() {
                (t, true) => {
                    let ux = ux_targets(step).ok_or_else(|| {
                        crate::input_error(
                            "UX targets come from the training set's features, embedded at each epoch's start, and \
                             no training set was given there",
                        )
                    })?;
                    crate::ensure_input!(
                        ux.bank.dim == clean.dim(),
                        "UX targets: the training set was embedded in {} dimensions at the epoch's start, and the \
                         model now embeds in {}; one model for both",
                        ux.bank.dim,
                        clean.dim()
                    );
                    ux_objective(ux, labels, t, step.rng, &x.device())?
                }
                (t, false) => Box::new(TowardTargets {
                    targets: pick_targets(labels, t.unwrap_or(1), false, step.rng)
                        .iter()
                        .map(|idx| clean.rows(idx))
                        .collect(),
                }),
            };
            let seed = step.start_seed(&self.pgd);
            let model = Model::Oracle(step.model_at(self.bn_set(k))?);
            out.push(Request::on(model, objective.as_ref(), &self.pgd).seed(seed).run(&x)?);
        }
        Ok(out)
    }

    /// The clean batch and each generated distribution, to be embedded in training mode through
    /// their own BN sets (or, without separate BNs, all through set 0 in one forward of the
    /// concatenated batches: BN statistics of the mixture, as a network without separate BNs
    /// sees them). The perturbed rows shown are the first distribution's.
    pub fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let clean = Clean::of(step.model()?, &step.x)?;
        let x = step.x.clone().without_autodiff();
        let generated = self.generate(step, &clean)?;
        let adversarial = generated.first().cloned().unwrap_or_else(|| x.clone());
        let forwards = if self.separate_bn {
            std::iter::once(Forward {
                images: x.clone(),
                bn_set: 0,
            })
            .chain(generated.into_iter().enumerate().map(|(k, images)| Forward {
                images,
                bn_set: self.bn_set(k),
            }))
            .collect()
        } else {
            let all = std::iter::once(x.clone()).chain(generated).collect::<Vec<_>>();
            vec![Forward {
                images: Tensor::cat(all, 0),
                bn_set: 0,
            }]
        };
        Ok(Plan {
            perturbed: Perturbed {
                triplets: None,
                dim: clean.dim(),
                clean,
                original: x,
                adversarial,
            },
            forwards,
        })
    }

    /// Eq. 5 with the configured loss over the clean and each generated distribution's
    /// training-mode embeddings.
    pub fn outer(&self, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        let n = step.labels.len();
        let k = 1 + self.distributions.len();
        let embeddings: Vec<Tensor<2>> = match emb.as_slice() {
            [all] if !self.separate_bn && all.dims()[0] == k * n => {
                (0..k).map(|i| all.clone().narrow(0, i * n, n)).collect()
            }
            _ if self.separate_bn && emb.len() == k && emb.iter().all(|e| e.dims()[0] == n) => emb,
            _ => anyhow::bail!(
                "MDProp: embeddings of {:?} rows for {k} distributions of {n} images",
                emb.iter().map(|e| e.dims()[0]).collect::<Vec<_>>()
            ),
        };
        let mut embeddings = embeddings.into_iter();
        let emb = embeddings.next().context("MDProp: no clean embeddings")?;
        let tr = diagnostics::spc2_random_triplets(step.labels);
        let diag = diagnostics::batch_on_device(&emb, &tr, step.loss.distance(), None);
        let mut total = loss::compute(step.loss, emb, step.labels, step.params, step.rng)?.loss;
        let mut adv_total = Tensor::<1>::zeros([1], &total.device().without_autodiff());
        for e in embeddings {
            let l = loss::compute(step.loss, e, step.labels, step.params, step.rng)?.loss;
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
fn ux_targets<'a>(step: &Inner<'a>) -> Option<UxTargets<'a>> {
    let (memory, items): (&'a dyn Memory, &'a [usize]) = (step.memory, step.items);
    let bank = memory.get::<UxMemory>()?.bank.as_ref()?;
    Some(UxTargets { bank, items })
}
