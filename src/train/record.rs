//! What a run is asked (`TrainOptions`) and what it records: each epoch, `run.json`, and the
//! state a checkpoint keeps besides the weights.

use crate::config::Experiment;
use crate::defense::DefenseState;
use crate::eval::Metrics;
use crate::eval::diagnostics::EpochDiagnostics;
use crate::eval::health::Verdict;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One epoch's record in `run.json` and the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: usize,
    pub batches: usize,
    /// NaN or infinite when training diverged: JSON writes it as `null`, read back as NaN.
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_loss: f64,
    pub seconds: f64,
    pub metrics: Option<Metrics>,
    /// Collapse diagnostics averaged over the epoch's batches.
    #[serde(default)]
    pub diagnostics: Option<EpochDiagnostics>,
}

fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `run.json`: the resolved config, the per-epoch history and the wall time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub config: Experiment,
    pub epochs: Vec<EpochRecord>,
    pub train_seconds: f64,
    pub final_metrics: Option<Metrics>,
    pub completed: bool,
    pub rdml_version: String,
    /// The health verdict of the final evaluation (see `eval::health`).
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// What the caller wants besides the config.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    pub out: PathBuf,
    pub resume: bool,
    /// Replace the run already in `out` (rdml's own files only).
    pub overwrite: bool,
    /// Print progress (a bar on a terminal, plain lines otherwise).
    pub progress: bool,
}

/// What a checkpoint holds besides the weights (`state.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CheckpointState {
    pub(super) epochs_done: usize,
    pub(super) history: Vec<EpochRecord>,
    pub(super) train_seconds: f64,
    pub(super) config_toml: String,
    #[serde(default)]
    pub(super) defense_state: DefenseState,
}
