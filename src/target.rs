//! A finished run opened as an attack target: the digest of its weights (which every record
//! derived from them carries), its model with the batch-norm set it infers with, its test split,
//! and the attack context on that split in the run's own distance. Every command and pipeline
//! that attacks, scores or exports a run opens it here.

use crate::attack::context::Context;
use crate::train::{LoadedRun, load_run};
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use std::path::Path;

pub struct Target {
    pub run: LoadedRun,
    /// [`crate::run_dir::model_digest`] of the weights, taken before they were loaded.
    pub digest: String,
}

impl Target {
    /// Opens the run in `dir` (its test split from `data` when given); `bn_set` ≠ 0 infers with
    /// that auxiliary batch-norm set (MDProp's ablation).
    pub fn open(dir: &Path, data: Option<&Path>, bn_set: usize, device: &Device) -> Result<Self> {
        crate::run_dir::check_finished(dir)?;
        let digest = crate::run_dir::model_digest(dir)?;
        let mut run = load_run(dir, data, device)?;
        if bn_set != 0 {
            run.net = run.net.with_inference_bn_set(bn_set).context("⟨bn_set⟩")?;
        }
        Ok(Self { run, digest })
    }

    /// The attack context on the test queries, reporting ES:D in the run's `loss.distance`, its
    /// clean embeddings made `batch` items at a time (the attack's `--batch`).
    pub fn context(&self, device: &Device, robrank_compat: bool, batch: usize) -> Result<Context> {
        self.context_on(device, robrank_compat, batch, &crate::ranks::Ranks::alone())
    }

    /// [`Target::context`], its clean embeddings (and every attack on it) split over `ranks`.
    pub fn context_on(
        &self,
        device: &Device,
        robrank_compat: bool,
        batch: usize,
        ranks: &crate::ranks::Ranks,
    ) -> Result<Context> {
        let oracle = std::sync::Arc::new(crate::attack::oracle::Net::new(&self.run.net, 0));
        let set = &self.run.test.query;
        Ok(Context::of_ranked(oracle, set, (batch, ranks), device, robrank_compat)?
            .with_distance(self.run.exp.loss.distance()))
    }
}
