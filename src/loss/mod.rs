//! Metric-learning losses and miners. Miners return indices; losses score embeddings at those
//! indices. Any miner pairs with the triplet, contrastive and margin losses (their
//! `[loss.miner]`, [`miner_table`]). Each loss is a file that owns its `[loss]` parameters and
//! implements [`Loss`]; [`LossConfig`] lists them, one line each.

pub mod contrastive;
pub mod device_miner;
pub mod distance;
pub mod dro;
pub mod dro_config;
#[cfg(test)]
pub mod example;
pub mod legacy;
pub mod lifted;
pub mod margin;
pub mod miner;
pub mod miner_table;
pub mod multisim;
pub mod npair;
pub mod rows;
pub mod triplet;
pub mod unit;

use anyhow::{Result, ensure};
use burn::module::Param;
use burn::tensor::{Device, Tensor};
use distance::Distance;
use miner::{Miner, Mining};
use rand_chacha::ChaCha8Rng;
pub use unit::{Batch, Loss, LossOutput, LossParams, TupleLoss, mine, mine_where};

crate::kinds::kind_registry! {
    /// The `[loss]` table of an experiment config: `kind` and that loss's own parameters.
    pub enum LossConfig: dyn Loss {
        "triplet" => Triplet(triplet::Triplet),
        "contrastive" => Contrastive(contrastive::Contrastive),
        "margin" => Margin(margin::Margin),
        "multi-similarity" => MultiSimilarity(multisim::MultiSimilarity),
        "lifted" => Lifted(lifted::Lifted),
        "npair" => Npair(npair::Npair),
        /// The DRO pair-weighting framework (seed 002) over a pairwise base loss on cosine
        /// similarity.
        "dro" => Dro(dro_config::Dro),
        #[cfg(test)]
        "example-centroid" => ExampleCentroid(example::Centroid),
    }
}

impl LossConfig {
    /// The triplet loss's margin (`None` for the other losses).
    pub fn triplet_margin(&self) -> Option<f32> {
        match self.unit().tuple() {
            Some(TupleLoss::Triplet { margin }) => Some(margin),
            _ => None,
        }
    }

    /// The distance the loss (and its miner) uses.
    pub fn distance(&self) -> Distance {
        self.unit().distance()
    }

    /// The mining settings the loss's triplets are mined with ([`mine`]; the defenses mine them
    /// on the clean embeddings).
    pub fn mining(&self) -> Mining {
        self.unit().mining().unwrap_or_default()
    }

    /// The miner of [`LossConfig::mining`] (random negatives for the losses that
    /// mine none of their own).
    pub fn tuple_miner(&self) -> Miner {
        self.mining().miner
    }

    pub fn validate(&self, l2_normalized: bool) -> Result<()> {
        ensure!(
            l2_normalized || !self.unit().needs_normalized(),
            "loss {} with distance {:?} needs model.l2_normalize = true",
            self.name(),
            self.distance()
        );
        self.unit().validate()
    }
}

/// Evaluates the configured loss on a batch of embeddings `[n, d]` with labels.
pub fn compute(
    cfg: &LossConfig,
    emb: Tensor<2>,
    labels: &[u32],
    params: &LossParams,
    rng: &mut ChaCha8Rng,
) -> Result<LossOutput> {
    debug_assert_eq!(emb.dims()[0], labels.len());
    let batch = Batch { emb, labels, params };
    cfg.unit().compute(&batch, rng)
}

/// The trainable parameters `cfg`'s loss owns.
impl LossParams {
    pub fn new(cfg: &LossConfig, device: &Device) -> Self {
        let beta = cfg
            .unit()
            .trainable_beta()
            .map(|(b, _)| Param::from_tensor(Tensor::<1>::from_floats([b], device)));
        Self { beta }
    }
}
