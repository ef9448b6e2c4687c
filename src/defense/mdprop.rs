//! MDProp (Singh et al., ACML'23; seed 004, Algorithm 1) and AdvProp-D (its Sec. 3.1.4): besides the
//! clean batch (batch-norm set 0), each extra distribution k = 1…K−1 is generated from the batch
//! with its own BN set — STAX (one target of another class), MTAX (T targets of other classes,
//! Eq. 3) or unadversarial examples (targets of the item's own class, Eq. 8) — and the loss is
//! `L(θ_n, θ_b¹, X) + Σ_k L(θ_n, θ_bᵏ, Xᵏ)` (Eq. 5). Inference uses set 0 only (`rdml eval
//! --bn-set k` for §5's ablation). Target features come from the clean set, the perturbed ones
//! from set k (Sec. 3.1.1). `separate_bn = false` runs every distribution through set 0: the
//! paper's shared-BN "AT" baseline (STAX alone) and its MTAX-without-separate-BNs ablation.

use super::{DefendedLoss, DefenseConfig, diagnostics};
use crate::attack::engine::{self, Objective};
use crate::attack::objective::targets::{TowardSets, TowardTargets};
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use anyhow::{Context as _, Result};
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
            let (t, _) = g.targets();
            anyhow::ensure!(t != Some(0), "defense.distributions: targets must be ≥ 1");
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
    /// Unadversarial examples (Eq. 8) toward every other training item of the item's class
    /// (`S_U`), or toward `targets` of them drawn anew each step (an unbiased, cheaper estimate
    /// of the same mean).
    Ux {
        #[serde(default)]
        targets: Option<usize>,
    },
}

impl Generated {
    /// Number of targets (`None`: all of `S_U`) and whether they share the item's class.
    pub fn targets(self) -> (Option<usize>, bool) {
        match self {
            Generated::Stax => (Some(1), false),
            Generated::Mtax { targets } => (Some(targets), false),
            Generated::Ux { targets } => (targets, true),
        }
    }
}

/// The features of Eq. 8's target sets: every training item embedded with the clean BN set in
/// evaluation mode. Eq. 8 takes `f′` at the current iteration; embedding the training set every
/// step would cost more than the step, so `rdml train` rebuilds the bank at the start of every
/// epoch (one extra pass over the training set per epoch).
pub struct UxBank {
    pub features: Vec<f32>,
    pub dim: usize,
    /// Training-set positions of each class.
    pub by_class: BTreeMap<u32, Vec<usize>>,
}

impl UxBank {
    pub fn build(
        net: &EmbeddingNet,
        set: &crate::data::ImageSet,
        batch: usize,
        device: &burn::tensor::Device,
    ) -> Result<Self> {
        let e = crate::eval::embed(net, set, batch, device)?;
        let mut by_class: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, &l) in set.labels.iter().enumerate() {
            by_class.entry(l).or_default().push(i);
        }
        Ok(Self {
            features: e.data,
            dim: e.dim,
            by_class,
        })
    }

    /// `S_U` of the item at training position `item` with label `label`: its class's other items
    /// (the item itself when it is alone in its class).
    pub fn set_of(&self, item: usize, label: u32) -> Vec<usize> {
        let all = self.by_class.get(&label).map(Vec::as_slice).unwrap_or(&[]);
        let others: Vec<usize> = all.iter().copied().filter(|&j| j != item).collect();
        if others.is_empty() { vec![item] } else { others }
    }
}

/// The bank and the batch items' training-set positions, for UX targets.
#[derive(Clone, Copy)]
pub struct UxTargets<'a> {
    pub bank: &'a UxBank,
    pub items: &'a [usize],
}

/// Eq. 8's objective for a batch: toward all of each item's `S_U`, or `t` draws from it per step.
pub fn ux_objective(
    ux: UxTargets,
    labels: &[u32],
    t: Option<usize>,
    rng: &mut ChaCha8Rng,
    device: &burn::tensor::Device,
) -> Result<Box<dyn Objective>> {
    anyhow::ensure!(
        ux.items.len() == labels.len(),
        "UX targets: {} item positions for {} labels",
        ux.items.len(),
        labels.len()
    );
    let sets: Vec<Vec<usize>> = ux
        .items
        .iter()
        .zip(labels)
        .map(|(&i, &l)| ux.bank.set_of(i, l))
        .collect();
    for set in &sets {
        anyhow::ensure!(
            set.iter().all(|&j| j < ux.bank.features.len() / ux.bank.dim.max(1)),
            "UX targets: an item position is outside the feature bank"
        );
    }
    if let Some(t) = t {
        let targets = (0..t)
            .map(|_| {
                let idx: Vec<usize> = sets.iter().map(|s| s[rng.random_range(0..s.len())]).collect();
                super::host_rows(&ux.bank.features, &idx, ux.bank.dim, device)
            })
            .collect();
        return Ok(Box::new(TowardTargets { targets }));
    }
    // The union of the batch's classes as candidates; each item weighs its own set.
    let mut column: BTreeMap<usize, usize> = BTreeMap::new();
    for &j in sets.iter().flatten() {
        let next = column.len();
        column.entry(j).or_insert(next);
    }
    let mut order = vec![0usize; column.len()];
    for (&j, &c) in &column {
        order[c] = j;
    }
    let m = order.len();
    let mut w = vec![0f32; labels.len() * m];
    for (i, set) in sets.iter().enumerate() {
        for &j in set {
            w[i * m + column[&j]] = 1.0 / set.len() as f32;
        }
    }
    let candidates = super::host_rows(&ux.bank.features, &order, ux.bank.dim, device);
    let cand_sq = candidates.clone().powi_scalar(2).sum_dim(1).reshape([1, m]);
    let weights = Tensor::<2>::from_data(TensorData::new(w, [labels.len(), m]), device);
    Ok(Box::new(TowardSets {
        candidates,
        cand_sq,
        weights,
    }))
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

/// The generated batches, one per distribution, on the plain device. STAX and MTAX targets are
/// batch items of other classes (Eq. 3's `S_B`); UX targets come from the training-set bank.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    cfg: &DefenseConfig,
    distributions: &[Generated],
    net: &EmbeddingNet,
    x: &Tensor<4>,
    (clean, dim): (&[f32], usize),
    labels: &[u32],
    ux: Option<UxTargets>,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Tensor<4>>> {
    let x = x.clone().without_autodiff();
    let mut out = vec![];
    for (k, g) in distributions.iter().enumerate() {
        let objective: Box<dyn Objective> = match g.targets() {
            (t, true) => {
                let ux =
                    ux.context("UX targets come from the training set's features, which only `rdml train` supplies")?;
                ux_objective(ux, labels, t, rng, &x.device())?
            }
            (t, false) => Box::new(TowardTargets {
                targets: pick_targets(labels, t.unwrap_or(1), false, rng)
                    .iter()
                    .map(|idx| super::host_rows(clean, idx, dim, &x.device()))
                    .collect(),
            }),
        };
        out.push(engine::attack(
            net,
            bn_set(cfg, k),
            &x,
            None,
            objective.as_ref(),
            &cfg.pgd(),
            0,
        )?);
    }
    Ok(out)
}

/// The BN set distribution `k` (0-based among the generated ones) trains and is generated with.
fn bn_set(cfg: &DefenseConfig, k: usize) -> usize {
    match cfg {
        DefenseConfig::Mdprop(c) if !c.separate_bn => 0,
        _ => k + 1,
    }
}

/// Eq. 5 with the configured loss, each distribution through its own BN set in training mode
/// (or, without separate BNs, all through set 0 in one forward).
#[allow(clippy::too_many_arguments)]
pub fn loss(
    cfg: &DefenseConfig,
    distributions: &[Generated],
    loss_cfg: &LossConfig,
    net: &EmbeddingNet,
    params: &LossParams,
    x: Tensor<4>,
    labels: &[u32],
    ux: Option<UxTargets>,
    rng: &mut ChaCha8Rng,
) -> Result<DefendedLoss> {
    let clean = super::Clean::of(net, &x);
    let generated = generate(
        cfg,
        distributions,
        net,
        &x,
        (clean.host()?, clean.dim()),
        labels,
        ux,
        rng,
    )?;
    let n = labels.len();
    let shared = matches!(cfg, DefenseConfig::Mdprop(c) if !c.separate_bn);
    let embeddings: Vec<Tensor<2>> = if shared {
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
                    .map(|(k, xk)| net.forward_set(xk.autodiff(), bn_set(cfg, k))),
            )
            .collect()
    };
    let mut embeddings = embeddings.into_iter();
    let emb = embeddings.next().context("MDProp: no clean embeddings")?;
    let tr = diagnostics::spc2_random_triplets(labels);
    let diag = diagnostics::batch_on_device(&emb, &tr, loss_cfg.distance(), None);
    let mut total = loss::compute(loss_cfg, emb, labels, params, rng)?.loss;
    let mut adv_total = Tensor::<1>::zeros([1], &total.device().without_autodiff());
    for e in embeddings {
        let l = loss::compute(loss_cfg, e, labels, params, rng)?.loss;
        adv_total = adv_total + l.clone().detach().without_autodiff();
        total = total + l;
    }
    Ok(DefendedLoss {
        loss: total,
        adv_loss: adv_total.div_scalar(distributions.len().max(1) as f64),
        diag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Five training items in two classes; the batch holds items 0 (class 0) and 3 (class 1).
    fn bank() -> UxBank {
        let features = vec![9.0, 9.0, 0.0, 1.0, 3.0, 0.0, 5.0, 5.0, 1.0, 2.0];
        let mut by_class = BTreeMap::new();
        by_class.insert(0, vec![0, 1, 2]);
        by_class.insert(1, vec![3, 4]);
        UxBank {
            features,
            dim: 2,
            by_class,
        }
    }

    /// Eq. 8: each item's mean distance to every other training item of its class, not to
    /// batch items; the item itself is left out.
    #[test]
    fn ux_targets_are_all_other_training_items_of_the_class() {
        let b = bank();
        assert_eq!(b.set_of(0, 0), vec![1, 2]);
        assert_eq!(b.set_of(3, 1), vec![4]);
        let dev = burn::tensor::Device::default();
        let ux = UxTargets {
            bank: &b,
            items: &[0, 3],
        };
        let rng = &mut ChaCha8Rng::seed_from_u64(0);
        let emb = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 0.0, 1.0, 1.0], [2, 2]), &dev);
        let all = ux_objective(ux, &[0, 1], None, rng, &dev).unwrap();
        // Item 0 at (0,0): targets (0,1) and (3,0) → (1 + 3)/2; item 3 at (1,1): target (1,2) → 1.
        let want = ((1.0 + 3.0) / 2.0 + 1.0) / 2.0;
        let got = all.loss(emb.clone(), 0).into_scalar::<f32>();
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // Drawn targets come from the same sets: item 3 can only draw item 4.
        let drawn = ux_objective(ux, &[0, 1], Some(4), rng, &dev).unwrap();
        let rows = drawn.row_losses(emb).unwrap().into_data().try_to_vec::<f32>().unwrap();
        assert!((rows[1] - 4.0).abs() < 1e-5, "{rows:?}");
        assert!(ux_objective(UxTargets { bank: &b, items: &[0] }, &[0, 1], None, rng, &dev).is_err());
    }
}
