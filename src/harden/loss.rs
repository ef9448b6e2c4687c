//! A loss in the caller's own loop (`rdml.Loss`, PyTorch metric learning's contract): the
//! `[loss]` table read as a config's is, then on each batch of the caller's embeddings the loss's
//! value and its gradient with respect to them (and to the margin loss's β), mined with the
//! loss's own miner from the session's stream, or over the tuples the caller mined.

use super::leaves::{self, Given};
use super::{Stream, labels_of, some_triplets};
use crate::loss::miner::Triplets;
use crate::loss::{self, LossConfig};
use anyhow::Result;
use burn::tensor::Device;
use serde::Deserialize;

/// `rdml.Loss(**table)`: the `[loss]` table, read as a config's is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossRequest {
    #[serde(deserialize_with = "crate::loss::legacy::read")]
    pub loss: LossConfig,
    #[serde(default)]
    pub seed: u64,
}

/// A loss's value and gradients on one batch.
pub struct Computed {
    pub value: f32,
    pub grad: Vec<f32>,
    pub beta_grad: Option<f32>,
    /// Triplets the loss was computed over (`None`: a loss over all pairs).
    pub triplets: Option<usize>,
}

/// One loss between the batches of a caller's loop.
pub struct LossSession {
    loss: LossConfig,
    stream: Stream,
    device: Device,
    /// The embeddings' width, as the first batch gave it.
    width: Option<usize>,
}

impl LossSession {
    pub fn open(r: LossRequest, device: &Device) -> Result<Self> {
        r.loss
            .validate(true)
            .map_err(|e| crate::input_error(format!("{e:#}")))?;
        Ok(Self {
            loss: r.loss,
            stream: Stream::new(r.seed),
            device: device.clone().without_autodiff(),
            width: None,
        })
    }

    pub fn config(&self) -> &LossConfig {
        &self.loss
    }

    /// The loss of `embeddings` (one row per label) and its gradient.
    pub fn compute(
        &mut self,
        embeddings: Given,
        labels: &[i64],
        beta: Option<f32>,
        tuples: Option<super::given::GivenTriplets>,
    ) -> Result<Computed> {
        let labels = labels_of(labels, "labels")?;
        let n = labels.len();
        crate::ensure_input!(n >= 1, "labels: none; expected one per row of the embeddings");
        let leaf = leaves::leaf(embeddings, n, &mut self.width, ("embeddings", &self.loss), &self.device)?;
        let params = leaves::params(&self.loss, beta, &self.device)?;
        let (value, triplets) = match tuples {
            Some(t) => {
                let t = self.given_triplets(t, &labels)?;
                let count = t.len();
                (crate::defense::triplets::tuple_loss(&self.loss, &leaf, &t), Some(count))
            }
            None => {
                self.loss
                    .unit()
                    .validate_batch(n)
                    .map_err(|e| crate::input_error(format!("{e:#}")))?;
                let out = loss::compute(&self.loss, leaf.clone(), &labels, &params, self.stream.rng())?;
                let count = out.triplets.map(|t| t.len());
                if let Some(c) = count {
                    some_triplets(c)?;
                }
                (out.loss, count)
            }
        };
        let pulled = leaves::pull(value, std::slice::from_ref(&leaf), &params)?;
        Ok(Computed {
            value: pulled.value,
            grad: pulled.grads.into_iter().next().unwrap_or_default(),
            beta_grad: pulled.beta_grad,
            triplets,
        })
    }

    /// The caller's triplets, checked against the batch's `labels` as a defense's `triplets=`
    /// are ([`super::given::GivenTriplets::checked`]), for a loss defined on tuples.
    fn given_triplets(&self, t: super::given::GivenTriplets, labels: &[u32]) -> Result<Triplets> {
        crate::ensure_input!(
            self.loss.unit().tuple().is_some(),
            "indices_tuple: loss {} mines no tuples of its own (it takes every pair of the batch); pass none",
            self.loss.name()
        );
        t.checked(labels, "indices_tuple")
    }

    /// What a checkpoint keeps: the stream.
    pub fn save(&self) -> Stream {
        self.stream.saved()
    }

    pub fn restore(&mut self, saved: Stream) -> Result<()> {
        self.stream = Stream::restored(saved)?;
        Ok(())
    }
}
