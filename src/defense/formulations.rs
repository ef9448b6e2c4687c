//! The robust formulations of seed 000 (§3.3, Eq. 11–13) as defenses. The paper states them over
//! the whole training set S and runs none of them (it trains with positive perturbation, §3.5).
//! As a trainer can, rdml reads S as the mini-batch and the surrogate loss `l̂(θ, (x_i, y_i), S)`
//! of Eq. 7–8 as the configured tuple loss (triplet or contrastive) over the tuples mined in the
//! batch with sample i as their anchor: the paper's own experiments mine tuples per mini-batch
//! (Appendix A).
//!
//! What the paper says of their cost, and what it is here:
//! - Formulation 1 (Eq. 11) perturbs every sample jointly (the max is outside the sum): over all of
//!   S that is one optimisation over the whole data set per step, "not convenient for current
//!   training algorithms, such as SGD and ADAM" and not open to sampling strategies. Over a
//!   mini-batch it is one PGD over the batch's images: one δ per image, shared by every tuple the
//!   image is in.
//! - Formulation 2 (Eq. 12) perturbs one sample at a time while the others stay intact, which the
//!   paper calls "more conducive" to SGD and to sampling. The n maximisations are independent, so
//!   rdml solves them together: one PGD over the batch's anchors with the clean batch held fixed
//!   beside them (twice the batch's rows per step, half of them frozen).
//! - Formulation 3 (Eq. 13) adds `λ·max_z d_θ(z, x_i)`, one embedding-shift PGD over the batch's
//!   images, and a forward of the shifted and clean images.

use super::triplets::{self, TripletLayout, select_rows};
use super::unit::{Budget, Clean, DefendedLoss, Defense, Forward, Inner, Outer, Perturbed, Plan, Start, one};
use crate::attack::budget::Pgd;
use crate::attack::engine::{Model, Request};
use crate::attack::objective::Objective;
use crate::loss::LossConfig;
use crate::loss::miner::Triplets;
use anyhow::Result;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// Formulation 1's parameters (`[defense] kind = "formulation-1"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Joint(pub Budget);

/// Formulation 2's parameters (`[defense] kind = "formulation-2"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct PerSample(pub Budget);

impl Defense for Joint {
    fn budget(&self) -> Budget {
        self.0
    }
    fn validate(&self, loss: &LossConfig) -> Result<()> {
        tuple_loss_only("formulation-1", loss)
    }
    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        perturb(Formulation::Joint, step, &self.pgd(step.state)).map(Plan::adversarial)
    }
    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        triplets::adversarial_outer(plan, emb, step)
    }
}

impl Defense for PerSample {
    fn budget(&self) -> Budget {
        self.0
    }
    fn validate(&self, loss: &LossConfig) -> Result<()> {
        tuple_loss_only("formulation-2", loss)
    }
    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        perturb(Formulation::PerSample, step, &self.pgd(step.state)).map(Plan::adversarial)
    }
    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        triplets::adversarial_outer(plan, emb, step)
    }
}

/// Formulation 3's parameters: the embedding-shift budget and λ.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RegularizedConfig {
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
    /// λ of Eq. 13.
    pub lambda: f32,
}

impl Defense for RegularizedConfig {
    fn budget(&self) -> Budget {
        Budget::of(self.eps, self.step, self.steps, (self.start, self.noise, self.project))
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let pgd = self.pgd(step.state);
        let perturbed = perturb(Formulation::Regularized, step, &pgd)?;
        with_shift(step, &pgd, perturbed)
    }

    /// The clean tuple loss plus the regulariser.
    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        let (emb, reg) = regularised(plan, one(emb)?, step, self.lambda)?;
        triplets::triplet_outcome(step.loss, &plan.perturbed, emb, Some(reg))
    }

    fn validate(&self, loss: &LossConfig) -> Result<()> {
        anyhow::ensure!(
            self.lambda.is_finite() && self.lambda >= 0.0,
            "defense.lambda (λ of Eq. 13) must be ≥ 0, got {}",
            self.lambda
        );
        tuple_loss_only("formulation-3", loss)
    }
}

/// The formulations need a tuple loss: `l̂` is defined on pairs and triplets (Eq. 7–8).
pub(crate) fn tuple_loss_only(kind: &str, loss: &LossConfig) -> Result<()> {
    anyhow::ensure!(
        loss.unit().tuple().is_some(),
        "defense {kind} is defined for loss.kind = \"triplet\" or \"contrastive\" (got \"{}\")",
        loss.name()
    );
    Ok(())
}

/// Which of the three formulations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formulation {
    /// Eq. 11: `min_θ max_{(z_1…z_n)} 1/n Σ_i l̂(θ, (z_i, y_i), S)`.
    Joint,
    /// Eq. 12: `min_θ 1/n Σ_i max_{z ∈ B(x_i, ε)} l̂(θ, (z, y_i), S)`.
    PerSample,
    /// Eq. 13: `min_θ 1/n Σ_i [l̂(θ, (x_i, y_i), S) + λ max_{z ∈ B(x_i, ε)} d_θ(z, x_i)]`.
    Regularized,
}

/// Ascends the configured tuple loss over `triplets` (indices into the attacked rows).
pub struct TupleLoss {
    pub triplets: Triplets,
    pub loss: LossConfig,
}

impl Objective for TupleLoss {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        triplets::tuple_loss(&self.loss, &emb, &self.triplets).neg()
    }
}

/// The inner maximisation of formulation `f` on the step's batch with the triplets mined on its
/// clean embeddings: the stacked `[a, p, n]` rows before and after.
fn perturb(f: Formulation, step: &mut Inner, pgd: &Pgd) -> Result<Perturbed> {
    let clean = Clean::of(step.model()?, &step.x)?;
    let tr = step.triplets(&clean)?;
    let seed = step.start_seed(pgd);
    let (original, adversarial) = inner(f, step, &tr, (pgd, seed))?;
    Ok(Perturbed {
        triplets: Some(tr),
        dim: clean.dim(),
        clean,
        original,
        adversarial,
    })
}

/// Formulation `f`'s images: the stacked `[a, p, n]` rows of `tr` before and after.
fn inner(f: Formulation, step: &Inner, tr: &Triplets, (pgd, seed): (&Pgd, u64)) -> Result<(Tensor<4>, Tensor<4>)> {
    let (model, loss_cfg) = (Model::Oracle(step.model()?), step.loss);
    let x = &step.x.clone().without_autodiff();
    let stacked = TripletLayout::gather_index(tr);
    let original = select_rows(x, &stacked);
    let n = x.dims()[0];
    let adversarial = match f {
        // One δ per image, every tuple's loss at once.
        Formulation::Joint => {
            let obj = TupleLoss {
                triplets: tr.clone(),
                loss: loss_cfg.clone(),
            };
            let z = Request::on(model, &obj, pgd).seed(seed).run(x)?;
            select_rows(&z, &stacked)
        }
        // Rows [z; x]: each anchor's z meets the clean positives and negatives of its tuples, so
        // its gradient is that of its own l̂ with the rest of S intact.
        Formulation::PerSample => {
            let rows = Tensor::cat(vec![x.clone(), x.clone()], 0);
            let obj = TupleLoss {
                triplets: Triplets {
                    anchor: tr.anchor.clone(),
                    positive: tr.positive.shifted(n),
                    negative: tr.negative.shifted(n),
                },
                loss: loss_cfg.clone(),
            };
            let mut movable = vec![false; 2 * n];
            for &a in &tr.anchor {
                movable[a] = true;
            }
            let z = Request::on(model, &obj, pgd)
                .movable(Some(&movable))
                .seed(seed)
                .run(&rows)?;
            let t = tr.len();
            let anchors = select_rows(&z, &tr.anchor_rows());
            let rest = original.clone().narrow(0, t, 2 * t);
            Tensor::cat(vec![anchors, rest], 0)
        }
        Formulation::Regularized => original.clone(),
    };
    Ok((original, adversarial))
}

/// Formulation 3's plan: the perturbed rows, `z` (the embedding-shift attack under `pgd` on
/// every image of the batch) and the batch, in one training-mode forward of `[perturbed; z; x]`.
pub(crate) fn with_shift(step: &mut Inner, pgd: &Pgd, perturbed: Perturbed) -> Result<Plan> {
    let x = step.x.clone().without_autodiff();
    let offset = crate::attack::objective::shift::Offset::Jitter;
    let seed = step.start_seed(pgd);
    let z = super::est::shift(step.model()?, pgd, &x, &perturbed.clean.emb, offset, seed)?;
    let images = Tensor::cat(vec![perturbed.adversarial.clone(), z, x], 0);
    Ok(Plan {
        perturbed,
        forwards: vec![Forward { images, bn_set: 0 }],
    })
}

/// From the embeddings `all` of [`with_shift`]'s forward: those of the perturbed rows, and Eq.
/// 13's regulariser `λ·(1/n) Σ_i d_θ(z_i, x_i)` (the equation sums over all n samples of the
/// batch, not only anchors).
pub(crate) fn regularised(plan: &Plan, all: Tensor<2>, step: &Outer, lambda: f32) -> Result<(Tensor<2>, Tensor<1>)> {
    let (m, n) = (plan.perturbed.adversarial.dims()[0], step.labels.len());
    anyhow::ensure!(
        all.dims()[0] == m + 2 * n,
        "formulation 3: {} embeddings; expected {} ({m} perturbed rows, then the {n} shifted and the {n} clean images)",
        all.dims()[0],
        m + 2 * n
    );
    let (e_first, e_z, e_x) = (
        all.clone().narrow(0, 0, m),
        all.clone().narrow(0, m, n),
        all.narrow(0, m + n, n),
    );
    let distance = step.loss.distance();
    Ok((e_first, distance.rows(e_z, e_x).mean().mul_scalar(lambda)))
}
