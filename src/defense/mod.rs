//! Robust training: each defense is an inner maximisation (an [`Objective`] for the attack engine
//! plus which batch rows move) and the outer loss the model is trained on. One small file per
//! paper method; this file holds the config, the triplet batch layout they share and the dispatch.

pub mod act;
pub mod config;
pub use config::{DefenseConfig, DefenseState, Destination, HmObjective};
pub mod ca_tride;
pub mod diagnostics;
pub mod est;
pub mod formulations;
pub mod hm;
pub mod madry;
pub mod mdprop;
pub mod positive_perturbation;

use crate::attack::engine::{self, Objective};
use crate::loss::distance::Distance;
use crate::loss::miner::Triplets;
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::tensor::{Int, Tensor};
use diagnostics::DeviceDiagnostics;
use rand_chacha::ChaCha8Rng;

/// A mined triplet batch laid out as rows `[a₀…a_{T−1}, p₀…, n₀…]` (images or embeddings).
pub struct TripletLayout {
    pub t: usize,
}

impl TripletLayout {
    /// Indices of the stacked rows into the original batch.
    pub fn gather_index(tr: &Triplets) -> Vec<usize> {
        tr.anchor
            .iter()
            .chain(&tr.positive)
            .chain(&tr.negative)
            .copied()
            .collect()
    }
    /// The triplets over stacked rows: (i, T+i, 2T+i).
    pub fn stacked(&self) -> Triplets {
        let t = self.t;
        Triplets {
            anchor: (0..t).collect(),
            positive: (t..2 * t).collect(),
            negative: (2 * t..3 * t).collect(),
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

/// Hardness `H = d(a, p) − d(a, n)` per row of the thirds → `[T]`.
pub fn hardness(a: Tensor<2>, p: Tensor<2>, n: Tensor<2>, d: Distance) -> Tensor<1> {
    d.rows(a.clone(), p) - d.rows(a, n)
}

pub(crate) fn select_rows(x: &Tensor<4>, idx: &[usize]) -> Tensor<4> {
    let i: Tensor<1, Int> = crate::host::index_tensor(idx, &x.device());
    x.clone().select(0, i)
}

/// What one defended training step produces: the loss to minimise and the diagnostics.
pub struct DefendedLoss {
    pub loss: Tensor<1>,
    /// The adversarial part of the loss, detached and left on the device (HM's LGA reads it at
    /// its next step).
    pub adv_loss: Tensor<1>,
    pub diag: DeviceDiagnostics,
}

/// The inner maximisation's result: the perturbed rows next to the originals. For triplet
/// defenses the rows are the stacked `[a, p, n]` of `triplets`; for EST the batch itself.
pub struct Perturbed {
    pub triplets: Option<Triplets>,
    /// Clean evaluation-mode embeddings of the batch, used for mining and the diagnostics.
    pub clean: Clean,
    pub dim: usize,
    pub original: Tensor<4>,
    pub adversarial: Tensor<4>,
}

/// The batch's clean evaluation-mode embeddings (robrank mines on the model's current
/// embeddings before perturbing): on the device, read back only by what needs them on the host
/// (a distance-based miner, HM's hardness, the shift-based defenses), once.
pub struct Clean {
    pub emb: Tensor<2>,
    host: std::cell::OnceCell<Vec<f32>>,
}

impl Clean {
    pub fn of(net: &EmbeddingNet, x: &Tensor<4>) -> Self {
        use burn::module::Module;
        Self {
            emb: net.valid().forward(x.clone().without_autodiff()),
            host: std::cell::OnceCell::new(),
        }
    }

    pub fn dim(&self) -> usize {
        self.emb.dims()[1]
    }

    /// The host copy, read on first use.
    pub fn host(&self) -> Result<&[f32]> {
        if self.host.get().is_none() {
            let v = crate::host::read(&self.emb)?;
            let _ = self.host.set(v);
        }
        Ok(self.host.get().map_or(&[][..], |v| v.as_slice()))
    }

    /// The loss's triplets: a random-negative miner needs no embeddings, the others the host
    /// copy.
    fn mine(&self, loss_cfg: &LossConfig, labels: &[u32], rng: &mut ChaCha8Rng) -> Result<Triplets> {
        let rows = if loss_cfg.tuple_miner() == loss::miner::Miner::Random {
            &[][..]
        } else {
            self.host()?
        };
        loss::mine_triplets(loss_cfg, rows, self.dim(), labels, rng)
    }
}

/// Runs only the defense's inner maximisation (on a plain device).
pub fn perturb(
    cfg: &DefenseConfig,
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    x: &Tensor<4>,
    labels: &[u32],
    state: &DefenseState,
    rng: &mut ChaCha8Rng,
) -> Result<Perturbed> {
    use formulations::Formulation::{Joint, PerSample, Regularized};
    let clean = Clean::of(net, x);
    let dim = clean.dim();
    let x = x.clone().without_autodiff();
    let (distance, _) = triplet_params(loss_cfg);
    let (tr, objective, movable): (Triplets, Box<dyn Objective>, Vec<bool>) = match cfg {
        DefenseConfig::Mdprop(_) | DefenseConfig::Advprop(_) | DefenseConfig::Est(_) => {
            let adversarial = if let DefenseConfig::Est(_) = cfg {
                est::perturb(cfg, net, &x, &clean.emb)?
            } else {
                // The first generated distribution (the others differ only in their objective).
                let generated = mdprop::generate(
                    cfg,
                    &cfg.distributions(),
                    net,
                    &x,
                    (clean.host()?, dim),
                    labels,
                    None,
                    rng,
                )?;
                generated.into_iter().next().unwrap_or_else(|| x.clone())
            };
            return Ok(Perturbed {
                triplets: None,
                clean,
                dim,
                original: x,
                adversarial,
            });
        }
        DefenseConfig::Madry(_) => {
            let tr = clean.mine(loss_cfg, labels, rng)?;
            let layout = TripletLayout { t: tr.len() };
            let movable = layout.movable(true, true, true);
            (tr, Box::new(madry::MaxHardness { layout, distance }), movable)
        }
        DefenseConfig::Act(_) => {
            let tr = clean.mine(loss_cfg, labels, rng)?;
            let layout = TripletLayout { t: tr.len() };
            let movable = layout.movable(false, true, true);
            (tr, Box::new(act::Collapse { layout, distance }), movable)
        }
        DefenseConfig::CaTride(c) => {
            ca_tride::plan(c, loss_cfg, (clean.host()?, dim), labels, state, &x.device(), rng)?
        }
        DefenseConfig::PositivePerturbation(_)
        | DefenseConfig::Formulation1(_)
        | DefenseConfig::Formulation2(_)
        | DefenseConfig::Formulation3(_) => {
            let tr = clean.mine(loss_cfg, labels, rng)?;
            let (original, adversarial) = match cfg {
                DefenseConfig::PositivePerturbation(c) => {
                    positive_perturbation::perturb(cfg, c, loss_cfg, net, &x, &tr, rng)?
                }
                DefenseConfig::Formulation1(_) => formulations::perturb(Joint, cfg, loss_cfg, net, &x, &tr)?,
                DefenseConfig::Formulation2(_) => formulations::perturb(PerSample, cfg, loss_cfg, net, &x, &tr)?,
                _ => formulations::perturb(Regularized, cfg, loss_cfg, net, &x, &tr)?,
            };
            return Ok(Perturbed {
                triplets: Some(tr),
                clean,
                dim,
                original,
                adversarial,
            });
        }
        DefenseConfig::Hm(c) => {
            let (tr, obj) = hm::plan(c, loss_cfg, clean.host()?, dim, labels, state, &x.device(), rng)?;
            let movable = TripletLayout { t: tr.len() }.movable(true, true, true);
            (tr, obj, movable)
        }
    };
    let original = select_rows(&x, &TripletLayout::gather_index(&tr));
    let mut pgd = cfg.pgd();
    if let DefenseConfig::CaTride(c) = cfg {
        pgd.step = c.step_at(state);
    }
    let skip =
        matches!(cfg, DefenseConfig::Hm(c) if hm::skips_attack(c)) || pgd.step == 0.0 || !movable.iter().any(|&m| m);
    let adversarial = if skip {
        original.clone()
    } else {
        engine::attack(net, 0, &original, Some(&movable), objective.as_ref(), &pgd, 0)?
    };
    Ok(Perturbed {
        triplets: Some(tr),
        clean,
        dim,
        original,
        adversarial,
    })
}

/// Runs the defense's inner maximisation on the batch `x` (autodiff device) and returns the
/// outer loss on the training-mode forward of the perturbed batch. `ux` supplies MDProp's UX
/// targets (the training-set features and the batch items' positions).
#[allow(clippy::too_many_arguments)]
pub fn defended_loss(
    cfg: &DefenseConfig,
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    params: &LossParams,
    x: Tensor<4>,
    labels: &[u32],
    state: &DefenseState,
    ux: Option<mdprop::UxTargets>,
    rng: &mut ChaCha8Rng,
) -> Result<DefendedLoss> {
    if matches!(cfg, DefenseConfig::Mdprop(_) | DefenseConfig::Advprop(_)) {
        return mdprop::loss(cfg, &cfg.distributions(), loss_cfg, net, params, x, labels, ux, rng);
    }
    let pert = perturb(cfg, loss_cfg, net, &x, labels, state, rng)?;
    match cfg {
        DefenseConfig::Est(_) => est::outer(loss_cfg, net, params, pert, labels, rng),
        DefenseConfig::Hm(hm::HmConfig { ics: Some(lambda), .. }) => {
            hm::outer_with_ics(loss_cfg, net, &x, pert, *lambda)
        }
        DefenseConfig::PositivePerturbation(c) => positive_perturbation::outer(cfg, c, loss_cfg, net, &x, pert),
        DefenseConfig::Formulation3(c) => formulations::regularized_outer(cfg, c, loss_cfg, net, &x, pert),
        DefenseConfig::CaTride(c) if !ca_tride::is_cap(c.mode, state) => ca_tride::anp_outer(c, loss_cfg, net, &pert),
        _ => {
            let emb = net.forward(pert.adversarial.clone().autodiff());
            triplet_outcome(loss_cfg, &pert, emb, None)
        }
    }
}

/// The triplet loss's distance and margin (validated: triplet-based defenses need that loss).
pub(crate) fn triplet_params(loss_cfg: &LossConfig) -> (Distance, f32) {
    (loss_cfg.distance(), loss_cfg.triplet_margin().unwrap_or(0.2))
}

/// Rows `idx` of host embeddings `[n, dim]` as a `[t, dim]` tensor on `device`.
pub(crate) fn host_rows(host: &[f32], idx: &[usize], dim: usize, device: &burn::tensor::Device) -> Tensor<2> {
    let v: Vec<f32> = idx
        .iter()
        .flat_map(|&i| host[i * dim..(i + 1) * dim].iter().copied())
        .collect();
    Tensor::<2>::from_data(burn::tensor::TensorData::new(v, [idx.len(), dim]), device)
}

/// The configured tuple loss — contrastive for a contrastive run (positive perturbation and seed
/// 000's formulations), the triplet loss otherwise — over `triplets` (row indices of `emb`).
pub(crate) fn tuple_loss(loss_cfg: &LossConfig, emb: &Tensor<2>, triplets: &Triplets) -> Tensor<1> {
    let (distance, margin) = triplet_params(loss_cfg);
    match loss_cfg {
        LossConfig::Contrastive {
            pos_margin, neg_margin, ..
        } => loss::contrastive::contrastive_loss(emb, triplets, distance, *pos_margin, *neg_margin),
        _ => loss::triplet::triplet_loss(emb, triplets, distance, margin),
    }
}

/// The shared tail of the tuple defenses: train on the configured tuple loss over the stacked
/// rows, plus an extra term, and report diagnostics against the clean mined triplets.
pub(crate) fn triplet_outcome(
    loss_cfg: &LossConfig,
    pert: &Perturbed,
    emb: Tensor<2>,
    extra: Option<Tensor<1>>,
) -> Result<DefendedLoss> {
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
) -> Result<DefendedLoss> {
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
