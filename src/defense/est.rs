//! Embedding-shifted triplet (EST; Zhou et al. ECCV'20, seed 003 Eq. 1): every image of the batch
//! is replaced by its adversarial counterpart `x + r*`, `r* = argmax_r d(φ(x + r), φ(x))` (the ES
//! attack, from the clean point), and the configured loss — with its own miner — is computed on
//! the shifted embeddings only.

use super::{DefendedLoss, DefenseConfig, Perturbed, diagnostics};
use crate::attack::engine;
use crate::attack::objective::shift::EmbeddingShift;
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;

/// The ES inner maximisation on every row of `x` (plain device), from the clean embeddings.
pub fn perturb(cfg: &DefenseConfig, net: &EmbeddingNet, x: &Tensor<4>, clean: &Tensor<2>) -> Result<Tensor<4>> {
    let obj = EmbeddingShift {
        clean: clean.clone().detach(),
    };
    engine::attack(net, 0, x, None, &obj, &cfg.pgd(), 0)
}

/// The configured loss on the training-mode embeddings of the shifted batch.
pub fn outer(
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    params: &LossParams,
    pert: Perturbed,
    labels: &[u32],
    rng: &mut ChaCha8Rng,
) -> Result<DefendedLoss> {
    let emb = net.forward(pert.adversarial.clone().autodiff());
    let out = loss::compute(loss_cfg, emb.clone(), labels, params, rng)?;
    let adv_loss = out.loss.clone().detach().without_autodiff();
    // Diagnostics on the triplets the loss trained on (losses without triplets: SPC-2 pairs with
    // random negatives, from the diagnostics' own generator).
    let tr = out
        .triplets
        .unwrap_or_else(|| diagnostics::spc2_random_triplets(labels));
    let (distance, margin) = super::triplet_params(loss_cfg);
    let diag = diagnostics::batch_on_device(&pert.clean.emb, &tr, distance, Some((&emb, &tr, margin)));
    Ok(DefendedLoss {
        loss: out.loss,
        adv_loss,
        diag,
    })
}
