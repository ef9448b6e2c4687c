//! What the triplet defenses share: mined triplets stacked as rows `[a, p, n]`, their hardness,
//! the PGD over those rows, and the tuple loss and diagnostics of the outer step.

use super::unit::{DefendedLoss, Inner, Outer, Perturbed, Plan, one};
use crate::attack::budget::Pgd;
use crate::attack::engine::{Model, Request};
use crate::attack::objective::Objective;
use crate::eval::diagnostics;
use crate::loss::distance::Distance;
use crate::loss::miner::{Rows, Triplets};
use crate::loss::{self, LossConfig};
use burn::tensor::{Int, Tensor};

/// A mined triplet batch laid out as rows `[a₀…a_{T−1}, p₀…, n₀…]` (images or embeddings).
#[derive(Debug, Clone, Copy)]
pub struct TripletLayout {
    pub t: usize,
}

impl TripletLayout {
    /// Indices of the stacked rows into the original batch.
    pub fn gather_index(tr: &Triplets) -> Rows {
        Rows::concat(&[&tr.anchor_rows(), &tr.positive, &tr.negative])
    }
    /// The triplets over stacked rows: (i, T+i, 2T+i).
    pub fn stacked(&self) -> Triplets {
        let t = self.t;
        Triplets {
            anchor: (0..t).collect(),
            positive: Rows::Host((t..2 * t).collect()),
            negative: Rows::Host((2 * t..3 * t).collect()),
        }
    }
    /// `[a, p, n]` thirds of a `[3T, d]` embedding tensor.
    pub fn split(&self, e: Tensor<2>) -> (Tensor<2>, Tensor<2>, Tensor<2>) {
        let t = self.t;
        (
            e.clone().narrow(0, 0, t),
            e.clone().narrow(0, t, t),
            e.narrow(0, 2 * t, t),
        )
    }
    /// Which of the 3T rows an attack may move.
    pub fn movable(&self, a: bool, p: bool, n: bool) -> Vec<bool> {
        [a, p, n].iter().flat_map(|&m| std::iter::repeat_n(m, self.t)).collect()
    }
}

/// Hardness `H = d(a, p) − d(a, n)` per row of the thirds → `[T]` (seed 003, Eq. 5), its
/// distances robrank's `F.pairwise_distance` ([`Distance::pairwise`]).
pub fn hardness(a: Tensor<2>, p: Tensor<2>, n: Tensor<2>, d: Distance) -> Tensor<1> {
    d.pairwise(a.clone(), p) - d.pairwise(a, n)
}

pub(crate) fn select_rows(x: &Tensor<4>, idx: &Rows) -> Tensor<4> {
    let i: Tensor<1, Int> = idx.tensor(&x.device());
    x.clone().select(0, i)
}

/// The triplet loss's distance and margin (validated: triplet-based defenses need that loss).
pub(crate) fn triplet_params(loss_cfg: &LossConfig) -> (Distance, f32) {
    (loss_cfg.distance(), loss_cfg.triplet_margin().unwrap_or(0.2))
}

/// One batch's triplet plan: the mined triplets, what PGD minimises over their stacked rows, and
/// which of those rows move (none: the triplets are trained on as they are).
pub(crate) struct TripletPlan {
    pub triplets: Triplets,
    pub objective: Box<dyn Objective>,
    pub movable: Vec<bool>,
}

/// The inner maximisation of Madry and ACT: the loss's triplets mined on the clean embeddings,
/// the thirds `moving` (a, p, n) free, `objective` built for their layout and the loss's distance.
pub(crate) fn perturb_mined(
    step: &mut Inner,
    pgd: &Pgd,
    (a, p, n): (bool, bool, bool),
    objective: impl FnOnce(TripletLayout, Distance) -> Box<dyn Objective>,
) -> anyhow::Result<Perturbed> {
    let clean = super::unit::Clean::of(step.model()?, &step.x)?;
    let triplets = step.triplets(&clean)?;
    let layout = TripletLayout { t: triplets.len() };
    let plan = TripletPlan {
        movable: layout.movable(a, p, n),
        objective: objective(layout, step.loss.distance()),
        triplets,
    };
    perturb_triplets(step, clean, plan, pgd)
}

/// Runs `plan`'s PGD under `pgd` over the stacked rows of its triplets.
pub(crate) fn perturb_triplets(
    step: &mut Inner,
    clean: super::unit::Clean,
    plan: TripletPlan,
    pgd: &Pgd,
) -> anyhow::Result<Perturbed> {
    let x = step.x.clone().without_autodiff();
    let original = select_rows(&x, &TripletLayout::gather_index(&plan.triplets));
    let adversarial = if pgd.step == 0.0 || !plan.movable.iter().any(|&m| m) {
        original.clone()
    } else {
        let seed = step.start_seed(pgd);
        Request::on(Model::Oracle(step.model()?), plan.objective.as_ref(), pgd)
            .movable(Some(&plan.movable))
            .seed(seed)
            .run(&original)?
    };
    Ok(Perturbed {
        triplets: Some(plan.triplets),
        dim: clean.dim(),
        clean,
        original,
        adversarial,
    })
}

/// The configured tuple loss — contrastive for a contrastive run (positive perturbation and seed
/// 000's formulations), the triplet loss otherwise — over `triplets` (row indices of `emb`).
pub(crate) fn tuple_loss(loss_cfg: &LossConfig, emb: &Tensor<2>, triplets: &Triplets) -> Tensor<1> {
    let (distance, margin) = triplet_params(loss_cfg);
    match loss_cfg.unit().tuple() {
        Some(loss::TupleLoss::Contrastive { pos_margin, neg_margin }) => {
            loss::contrastive::contrastive_loss(emb, triplets, distance, pos_margin, neg_margin)
        }
        _ => loss::triplet::triplet_loss(emb, triplets, distance, margin),
    }
}

/// The outer loss of the defenses trained on their perturbed triplets alone: the tuple loss of
/// the training-mode embeddings of the plan's one forward (its adversarial rows).
pub(crate) fn adversarial_outer(plan: &Plan, emb: Vec<Tensor<2>>, step: &Outer) -> anyhow::Result<DefendedLoss> {
    triplet_outcome(step.loss, &plan.perturbed, one(emb)?, None)
}

/// The shared tail of the tuple defenses: train on the configured tuple loss over the stacked
/// rows, plus an extra term, and report diagnostics against the clean mined triplets.
pub(crate) fn triplet_outcome(
    loss_cfg: &LossConfig,
    pert: &Perturbed,
    emb: Tensor<2>,
    extra: Option<Tensor<1>>,
) -> anyhow::Result<DefendedLoss> {
    let t = pert.triplets.as_ref().map_or(0, Triplets::len);
    let main = tuple_loss(loss_cfg, &emb, &TripletLayout { t }.stacked());
    tuple_outcome(loss_cfg, pert, emb, main, extra)
}

/// `main + extra` as the loss, with diagnostics of the stacked `[a, p, n]` embeddings `emb`.
pub(crate) fn tuple_outcome(
    loss_cfg: &LossConfig,
    pert: &Perturbed,
    emb: Tensor<2>,
    main: Tensor<1>,
    extra: Option<Tensor<1>>,
) -> anyhow::Result<DefendedLoss> {
    let (distance, margin) = triplet_params(loss_cfg);
    let empty = Triplets::default();
    let tr = pert.triplets.as_ref().unwrap_or(&empty);
    let stacked = TripletLayout { t: tr.len() }.stacked();
    let diag = diagnostics::batch_on_device(&pert.clean.emb, tr, distance, Some((&emb, &stacked, margin)));
    let adv_loss = main.clone().detach().without_autodiff();
    let loss = match extra {
        Some(e) => main + e,
        None => main,
    };
    Ok(DefendedLoss { loss, adv_loss, diag })
}
