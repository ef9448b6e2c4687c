//! Embedding-shifted triplet (EST; Zhou et al. ECCV'20, seed 003 Eq. 1): every image of the batch
//! is replaced by its adversarial counterpart `x + r*`, `r* = argmax_r d(φ(x + r), φ(x))` (the ES
//! attack, from the clean point), and the configured loss — with its own miner — is computed on
//! the shifted embeddings only.

use super::unit::{Budget, Clean, DefendedLoss, Defense, Inner, Outer, Perturbed, Plan, one};
use crate::attack::budget::Pgd;
use crate::attack::engine::{Model, Request};
use crate::attack::objective::shift::{EmbeddingShift, Offset};
use crate::attack::oracle::Oracle;
use crate::eval::diagnostics;
use crate::loss;
use anyhow::Result;
use burn::tensor::Tensor;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// EST's parameters (`[defense] kind = "est"`): the PGD budget alone.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Est(pub Budget);

impl Defense for Est {
    fn budget(&self) -> Budget {
        self.0
    }

    fn outer_is_the_loss(&self) -> bool {
        true
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let model = step.model()?;
        let clean = Clean::of(model, &step.x)?;
        let x = step.x.clone().without_autodiff();
        // robrank's first step, from the eps of its `F.pairwise_distance` and a fresh ternary draw
        // per batch (its unseeded `randint_like`): seed 003 Eq. 1 says nothing of how the zero
        // gradient at the clean point is broken. A draw fixed for every batch would start each
        // batch's shift along the same per-row tilt.
        let offset = Offset::robrank_training(step.loss.distance(), step.rng.random());
        let pgd = self.pgd(step.state);
        let seed = step.start_seed(&pgd);
        let adversarial = shift(model, &pgd, &x, &clean.emb, offset, seed)?;
        Ok(Plan::adversarial(Perturbed {
            triplets: None,
            dim: clean.dim(),
            clean,
            original: x,
            adversarial,
        }))
    }

    /// The configured loss on the training-mode embeddings of the shifted batch.
    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        let emb = one(emb)?;
        let out = loss::compute(step.loss, emb.clone(), step.labels, step.params, step.rng)?;
        let adv_loss = out.loss.clone().detach().without_autodiff();
        // Diagnostics on the triplets the loss trained on (losses without triplets: SPC-2 pairs
        // with random negatives, from the diagnostics' own generator).
        let tr = out
            .triplets
            .unwrap_or_else(|| diagnostics::spc2_random_triplets(step.labels));
        let (distance, margin) = super::triplets::triplet_params(step.loss);
        let clean = &plan.perturbed.clean.emb;
        let diag = diagnostics::batch_on_device(clean, &tr, distance, Some((&emb, &tr, margin)));
        Ok(DefendedLoss {
            loss: out.loss,
            adv_loss,
            diag,
        })
    }
}

/// The ES inner maximisation on every row of `x` (plain device), from the clean embeddings, its
/// zero gradient at the start broken by `offset` (and `seed`'s random start where `pgd` has one).
pub fn shift(
    model: &dyn Oracle,
    pgd: &Pgd,
    x: &Tensor<4>,
    clean: &Tensor<2>,
    offset: Offset,
    seed: u64,
) -> Result<Tensor<4>> {
    let obj = EmbeddingShift {
        clean: clean.clone().detach(),
        offset,
    };
    Request::on(Model::Oracle(model), &obj, pgd).seed(seed).run(x)
}
