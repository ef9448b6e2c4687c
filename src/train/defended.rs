//! A defended step on rdml's own network, one of the two callers of a defense (a PyTorch loop,
//! through `harden`, is the other): the inner maximisation over the network as the attacks
//! see it (evaluation mode, one oracle per batch-norm set), the plan's forwards through the
//! network in training mode, and the defense's outer loss of those embeddings, whose gradient
//! burn's autodiff carries on through the network.

use crate::attack::oracle::{Net, Oracle};
use crate::defense::{DefendedLoss, DefenseConfig, DefenseState, Inner, Memory, Outer};
use crate::eval::diagnostics::{self, DeviceDiagnostics};
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::module::Module;
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;

/// The defense's loss on the batch `x` (autodiff device; `items`: its training-set positions),
/// through `net` in training mode.
#[allow(clippy::too_many_arguments)]
pub fn defended_loss(
    cfg: &DefenseConfig,
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    params: &LossParams,
    x: Tensor<4>,
    (labels, items): (&[u32], &[usize]),
    state: &DefenseState,
    memory: &dyn Memory,
    rng: &mut ChaCha8Rng,
) -> Result<DefendedLoss> {
    let unit = cfg.unit();
    let valid = net.valid();
    let nets: Vec<Net> = (0..unit.bn_sets().max(1))
        .map(|bn_set| Net {
            model: valid.clone(),
            bn_set,
        })
        .collect();
    let models: Vec<&dyn Oracle> = nets.iter().map(|n| n as &dyn Oracle).collect();
    let plan = unit.inner(&mut Inner {
        loss: loss_cfg,
        models: &models,
        x: x.without_autodiff(),
        labels,
        items,
        state,
        memory,
        rng,
        given: None,
    })?;
    let emb = plan
        .forwards
        .iter()
        .map(|f| net.forward_set(f.images.clone().autodiff(), f.bn_set))
        .collect();
    unit.outer(
        &plan,
        emb,
        &mut Outer {
            loss: loss_cfg,
            params,
            labels,
            state,
            rng,
        },
    )
}

/// One training step's loss as `rdml train` takes it: the defense's ([`defended_loss`]), or the
/// loss of the batch's training-mode embeddings; with the batch's diagnostics and, for a
/// defense, its adversarial loss (detached, on the device).
#[allow(clippy::too_many_arguments)]
pub fn step_loss(
    defense: Option<&DefenseConfig>,
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    params: &LossParams,
    x: Tensor<4>,
    (labels, items): (&[u32], &[usize]),
    (state, memory): (&DefenseState, &dyn Memory),
    rng: &mut ChaCha8Rng,
) -> Result<(Tensor<1>, DeviceDiagnostics, Option<Tensor<1>>)> {
    if let Some(d) = defense {
        let out = defended_loss(d, loss_cfg, net, params, x, (labels, items), state, memory, rng)?;
        return Ok((out.loss, out.diag, Some(out.adv_loss)));
    }
    let emb = net.forward(x);
    let out = loss::compute(loss_cfg, emb.clone(), labels, params, rng)?;
    let tr = match &out.triplets {
        Some(t) => t.clone(),
        None => diagnostics::spc2_random_triplets(labels),
    };
    let diag = diagnostics::batch_on_device(&emb, &tr, loss_cfg.distance(), None);
    Ok((out.loss, diag, None))
}
