//! rdml's defenses and losses inside the caller's own training loop, where the model trains (the
//! Python package's `rdml.Defense` and `rdml.Loss`, PyTorch modules on their own devices). A
//! defense asks the caller's model only what an attack asks (embed, and a vector–Jacobian product:
//! [`crate::attack::oracle::External`]); a loss is a function of embeddings whose value and
//! gradient rdml computes and hands back, and the caller's framework carries that gradient on
//! through its model, with its own optimizer, mixed precision and data-parallel wrapper.

mod defense;
mod given;
pub mod leaves;
mod loss;
pub mod reference;

pub use defense::{DefenseRequest, DefenseSession, Forwards, Perturbation, Saved, Stepped};
pub use given::GivenTriplets;
pub use loss::{Computed, LossRequest, LossSession};

use crate::data::ImageSet;
use crate::data::set::Source;
use crate::loss::LossConfig;
use anyhow::Result;
use burn::tensor::{Device, Tensor, TensorData};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The loss a defense trains with when the caller names none: robrank's triplet loss.
fn triplet() -> LossConfig {
    serde_json::from_value(serde_json::json!({"kind": "triplet"})).unwrap_or_else(|_| unreachable!())
}

/// The caller's images (`[0, 1]`, row-major `N × C × H × W`) and their labels, as the scoring
/// jobs take them.
pub use crate::scoring::model::Images;

/// The images as a tensor on `device`, checked as the scoring jobs check them.
fn tensor(images: &Images, device: &Device) -> Result<Tensor<4>> {
    crate::scoring::model::check_images(&images.images, images.shape)?;
    crate::ensure_input!(
        images.labels.len() == images.shape[0],
        "labels: {} for {} images",
        images.labels.len(),
        images.shape[0]
    );
    Ok(Tensor::<4>::from_data(
        TensorData::new(images.images.clone(), images.shape),
        device,
    ))
}

/// The images as a data set (a training set embedded at an epoch's start), their labels kept as
/// they are (the batches' labels are compared with them).
fn training_set(images: Images, what: &str) -> Result<ImageSet> {
    crate::scoring::model::check_images(&images.images, images.shape)?;
    let labels = labels_of(&images.labels, "labels")?;
    crate::ensure_input!(
        labels.len() == images.shape[0],
        "labels: {} for {} images",
        labels.len(),
        images.shape[0]
    );
    let [n, channels, height, width] = images.shape;
    let source = Source::Floats {
        data: images.images,
        channels,
        height,
        width,
    };
    Ok(ImageSet::new(what, Arc::new(source), (0..n).collect(), labels))
}

/// Refuses a batch in which the loss's miner found no triplet: no anchor has both a positive
/// (another item of its class) and a negative, and a mean over no triplet is no loss.
fn some_triplets(count: usize) -> Result<()> {
    crate::ensure_input!(
        count > 0,
        "labels: no item of the batch has both another item of its class and an item of another class, so no \
         triplet can be mined (a batch of pairs of one class each, as robrank's SPC-2 sampler draws, has one per pair)"
    );
    Ok(())
}

/// Labels as rdml's miners compare them: each an integer in `0..2³²`, kept as it is, so that the
/// classes of one batch are those of the next (and of the training set a memory keeps).
fn labels_of(labels: &[i64], what: &str) -> Result<Vec<u32>> {
    labels
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            u32::try_from(l).map_err(|_| {
                crate::input_error(format!(
                    "{what}: label {l} (item {i}); expected integers from 0 to {}",
                    u32::MAX
                ))
            })
        })
        .collect()
}

/// The random stream a session draws from (mining, target draws), as `rdml train` draws it: the
/// seed's stream 2, at each epoch's own position; saved as its place, so a resumed session
/// draws what an uninterrupted one would.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    pub seed: u64,
    /// The position in the stream, in 32-bit words (a decimal string: it exceeds 2⁶⁴).
    pub word_pos: String,
    #[serde(skip)]
    rng: Option<ChaCha8Rng>,
}

impl Stream {
    pub fn new(seed: u64) -> Self {
        let mut s = Self {
            seed,
            word_pos: "0".into(),
            rng: None,
        };
        s.at_epoch(0);
        s
    }

    /// The stream at the start of epoch `epoch` (`data::sampler::epoch_rng`).
    pub fn at_epoch(&mut self, epoch: usize) {
        self.rng = Some(crate::data::sampler::epoch_rng(self.seed, epoch, 2));
    }

    /// The generator, where the stream stands.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        let (seed, pos) = (self.seed, self.word_pos.parse::<u128>().unwrap_or(0));
        self.rng.get_or_insert_with(|| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            r.set_stream(2);
            r.set_word_pos(pos);
            r
        })
    }

    /// The stream as a checkpoint keeps it.
    fn saved(&self) -> Self {
        let word_pos = self
            .rng
            .as_ref()
            .map_or_else(|| self.word_pos.clone(), |r| r.get_word_pos().to_string());
        Self {
            seed: self.seed,
            word_pos,
            rng: None,
        }
    }

    /// A saved stream, checked.
    fn restored(saved: Self) -> Result<Self> {
        crate::ensure_input!(
            saved.word_pos.parse::<u128>().is_ok(),
            "stream.word_pos: {:?}; expected a decimal integer",
            saved.word_pos
        );
        Ok(Self { rng: None, ..saved })
    }
}
