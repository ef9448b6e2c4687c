//! The interface every loss implements, and the batch it sees.

use super::distance::Distance;
use super::miner::{self, Miner, Mining, Triplets};
use anyhow::{Result, ensure};
use burn::module::{Module, Param};
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;
use std::borrow::Cow;

/// One loss: its parameters' checks, the distance it and its miner use, and its value on a batch.
pub trait Loss {
    /// The distance the loss (and its miner) uses.
    fn distance(&self) -> Distance;

    /// Its tuple mining settings; `None` for the losses that mine no tuples (a defense then
    /// draws random negatives on SPC-2 pairs, [`Mining::default`]).
    fn mining(&self) -> Option<Mining> {
        None
    }

    /// Whether it needs L2-normalised embeddings (by its distance, unless it says otherwise).
    fn needs_normalized(&self) -> bool {
        self.distance().needs_normalized()
    }

    /// Checks its parameters; an error names the key (`loss.margin`) and what is expected.
    fn validate(&self) -> Result<()>;

    /// A trainable scalar the loss owns (the margin loss's β): its initial value and its
    /// learning rate.
    fn trainable_beta(&self) -> Option<(f32, f64)> {
        None
    }

    /// The tuple loss it is, for the defenses that evaluate a loss on perturbed tuples (the
    /// positive-perturbation paper's `l̂` of Eq. 7–8); `None` for the other losses.
    fn tuple(&self) -> Option<TupleLoss> {
        None
    }

    /// Checks it against the training batch of `batch` items (DRO's top-k within its pairs).
    fn validate_batch(&self, _batch: usize) -> Result<()> {
        Ok(())
    }

    /// The loss on one batch.
    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput>;
}

/// A tuple loss's kind and margins, which the tuple defenses evaluate themselves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TupleLoss {
    /// `[d(a,p) − d(a,n) + margin]_+` (Eq. 4).
    Triplet { margin: f32 },
    /// `[d(a,p) − m⁺]_+ + [m⁻ − d(a,n)]_+` (Eq. 3).
    Contrastive { pos_margin: f32, neg_margin: f32 },
}

/// `v` as a finite number ≥ 0, or an error naming `loss.{what}`.
pub(crate) fn non_negative(v: f32, what: &str) -> Result<()> {
    ensure!(
        v.is_finite() && v >= 0.0,
        "loss.{what} must be a finite number ≥ 0, got {v}"
    );
    Ok(())
}

/// What a loss evaluation returns: the scalar loss and, for triplet-based losses, the triplets.
pub struct LossOutput {
    pub loss: Tensor<1>,
    pub triplets: Option<Triplets>,
}

/// A batch of embeddings `[n, d]` with its labels, as a loss sees it.
pub struct Batch<'a> {
    pub emb: Tensor<2>,
    pub labels: &'a [u32],
    pub params: &'a LossParams,
}

impl Batch<'_> {
    /// Triplets mined with `loss`'s settings on the detached embeddings ([`mine_where`]).
    pub fn triplets(&self, loss: &dyn Loss, rng: &mut ChaCha8Rng) -> Result<Triplets> {
        let mining = loss.mining().unwrap_or_default();
        mine_where(&mining, loss.distance(), &self.emb, self.labels, rng, || {
            Ok(Cow::Owned(crate::host::read(&self.emb)?))
        })
    }
}

/// Triplets under `mining` from the detached embeddings `emb`, chosen where it costs no wait:
/// random negatives need no distances, a GPU mines the others where `emb` is, the CPU on the
/// host copy `host` gives (asked for only then).
pub fn mine_where<'h>(
    mining: &Mining,
    distance: Distance,
    emb: &Tensor<2>,
    labels: &[u32],
    rng: &mut ChaCha8Rng,
    host: impl FnOnce() -> Result<Cow<'h, [f32]>>,
) -> Result<Triplets> {
    let dim = emb.dims()[1];
    if mining.miner == Miner::Random {
        mine(mining, distance, &[], dim, labels, rng)
    } else if super::device_miner::mines_on_device(&emb.device()) {
        Ok(super::device_miner::mine(mining, distance, emb, labels, rng))
    } else {
        mine(mining, distance, &host()?, dim, labels, rng)
    }
}

/// Mines triplets on detached host embeddings `[n, dim]` with `mining`'s settings.
pub fn mine(
    mining: &Mining,
    distance: Distance,
    host: &[f32],
    dim: usize,
    labels: &[u32],
    rng: &mut ChaCha8Rng,
) -> Result<Triplets> {
    let n = labels.len();
    // Random negatives need no distances.
    let dist = if mining.miner == Miner::Random {
        vec![]
    } else {
        distance.host_matrix(host, n, dim)?
    };
    let pairs = miner::anchor_pairs(labels, mining.anchors, rng);
    Ok(miner::mine(
        mining.miner,
        &dist,
        labels,
        &pairs,
        &mining.options(dim),
        rng,
    ))
}

/// Trainable parameters that belong to the loss (the margin loss's β).
#[derive(Module, Debug)]
pub struct LossParams {
    pub beta: Option<Param<Tensor<1>>>,
}
