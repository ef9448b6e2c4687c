//! What a defense keeps from one step or epoch to the next, as pytorch-metric-learning's
//! cross-batch memory keeps its own: HM's previous adversarial loss (LGA), MDProp's bank of
//! training-set features (UX). The defense makes it ([`super::Defense::memory`]); the trainer
//! holds it without knowing what it is, tells it of each epoch's start and each step's outcome,
//! and saves what it says into the checkpoint.

use crate::attack::oracle::Oracle;
use crate::data::ImageSet;
use anyhow::Result;
use burn::tensor::{Device, Tensor};
use serde_json::{Map, Value};
use std::any::Any;

/// An epoch about to start, as a memory sees it.
pub struct EpochStart<'a> {
    /// The model as the epoch starts (clean set, evaluation mode).
    pub model: &'a dyn Oracle,
    pub train: &'a ImageSet,
    /// Items per forward pass when it embeds a set.
    pub batch: usize,
    pub device: &'a Device,
}

/// A defense's state between steps.
pub trait Memory: Any + Send {
    /// Whether [`Memory::start_epoch`] reads the training set (MDProp's UX bank embeds it); a
    /// caller that trains in its own loop must then give it.
    fn needs_training_set(&self) -> bool {
        false
    }

    /// Before an epoch's first step.
    fn start_epoch(&mut self, _at: &EpochStart) -> Result<()> {
        Ok(())
    }

    /// After each training step, with the step's adversarial loss (still on the device).
    fn after_step(&mut self, _adv_loss: &Tensor<1>) {}

    /// Whether [`Memory::after_step`] keeps anything of the loss (a caller who perturbs with the
    /// defense and trains with its own loss must then tell it).
    fn reads_loss(&self) -> bool {
        false
    }

    /// A device scalar it needs on the host, which the trainer reads together with the step's
    /// loss (one read for both) and hands to [`Memory::read`].
    fn to_read(&mut self) -> Option<Tensor<1>> {
        None
    }

    fn read(&mut self, _value: f32) {}

    /// What the checkpoint keeps of it (keys of the checkpoint's `defense_state`).
    fn save(&self) -> Map<String, Value> {
        Map::new()
    }

    /// Takes back what [`Memory::save`] kept (keys it does not know are left alone).
    fn restore(&mut self, _saved: &Map<String, Value>) -> Result<()> {
        Ok(())
    }

    fn as_any(&self) -> &dyn Any;
}

impl dyn Memory {
    /// The memory as the defense's own type (`None` for another defense's).
    pub fn get<T: Memory>(&self) -> Option<&T> {
        self.as_any().downcast_ref::<T>()
    }
}

/// The memory of a defense that keeps nothing.
pub struct Nothing;

impl Memory for Nothing {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Reads a saved number, naming the checkpoint key it expected.
pub fn saved_number(saved: &Map<String, Value>, key: &str) -> Result<Option<f32>> {
    match saved.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| anyhow::anyhow!("checkpoint defense_state.{key}: expected a number, got {v}")),
    }
}
