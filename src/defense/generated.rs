//! MDProp's generated distributions (seed 004, Sec. 3.1): STAX and MTAX toward batch items of
//! other classes (Eq. 3), unadversarial examples toward the item's own class in the training set
//! (Eq. 8), and the training-set feature bank UX draws its targets from.

use crate::attack::objective::Objective;
use crate::attack::objective::targets::{TowardSets, TowardTargets};
use crate::attack::oracle::Oracle;
use anyhow::Result;
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Every item of `set` embedded by `model` (its clean set, evaluation mode), `batch` at a time.
    pub fn build(
        model: &dyn Oracle,
        set: &crate::data::ImageSet,
        batch: usize,
        device: &burn::tensor::Device,
    ) -> Result<Self> {
        let e = crate::attack::context::embed_set(model, set, batch, &device.clone().without_autodiff())?;
        Ok(Self::of(e.data, e.dim, &set.labels))
    }

    /// The bank of training-set features `features` (`labels.len()` rows of `dim`).
    pub fn of(features: Vec<f32>, dim: usize, labels: &[u32]) -> Self {
        let mut by_class: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, &l) in labels.iter().enumerate() {
            by_class.entry(l).or_default().push(i);
        }
        Self {
            features,
            dim,
            by_class,
        }
    }

    /// `S_U` of the item at training position `item` with label `label`: its class's other items
    /// (the item itself when it is alone in its class).
    pub fn set_of(&self, item: usize, label: u32) -> Vec<usize> {
        let all = self.by_class.get(&label).map(Vec::as_slice).unwrap_or(&[]);
        let others: Vec<usize> = all.iter().copied().filter(|&j| j != item).collect();
        if others.is_empty() { vec![item] } else { others }
    }
}

/// MDProp's memory when it generates UX: the bank, rebuilt at every epoch's start.
#[derive(Default)]
pub struct UxMemory {
    pub bank: Option<UxBank>,
}

impl super::memory::Memory for UxMemory {
    fn needs_training_set(&self) -> bool {
        true
    }

    fn start_epoch(&mut self, at: &super::memory::EpochStart) -> Result<()> {
        self.bank = Some(UxBank::build(at.model, at.train, at.batch, at.device)?);
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
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
                crate::host::rows(&ux.bank.features, &idx, ux.bank.dim, device)
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
    let candidates = crate::host::rows(&ux.bank.features, &order, ux.bank.dim, device);
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
