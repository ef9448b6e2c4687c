//! A training job as `rdml train` and Python's `rdml.train` ask for it: the config and its
//! overrides resolved once here, trained, and the run's report written (a failed report is a
//! warning: the run is already whole). Both front ends fill [`TrainJob`] and call it.

use crate::config::Experiment;
use crate::train::{RunReport, TrainOptions};
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;

/// What a training run is asked for, as each front end's options give it (read from JSON by
/// the Python package, by these names).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainJob {
    /// A preset name or a TOML file.
    pub config: String,
    /// Config overrides, then the shorthands for `train.epochs` and `train.max_batches`.
    #[serde(default)]
    pub set: crate::config::SetKeys,
    #[serde(default)]
    pub epochs: Option<usize>,
    #[serde(default)]
    pub max_batches: Option<usize>,
    /// A defense as an inline TOML table, or `none`.
    #[serde(default)]
    pub defense: Option<String>,
    /// The data set's folder, when not the config's.
    #[serde(default)]
    pub data: Option<PathBuf>,
    pub out: PathBuf,
    #[serde(default)]
    pub resume: bool,
    #[serde(default)]
    pub overwrite: bool,
    #[serde(default = "crate::field::yes")]
    pub progress: bool,
}

impl TrainJob {
    /// The experiment the job trains (the front end opens its device from it).
    pub fn experiment(&self) -> Result<Experiment> {
        let o = crate::config::command_overrides(&self.set.texts()?, self.epochs, self.max_batches);
        let mut exp = Experiment::load_with_defense(&self.config, &o, self.defense.as_deref())?;
        if let Some(d) = &self.data {
            exp.data.use_folder(d);
        }
        Ok(exp)
    }

    /// Loads the experiment (a failure is the caller's input), opens the device it names with
    /// `device` (only then), and trains.
    pub fn run_on(&self, device: impl FnOnce(&Experiment) -> Result<Device>) -> Result<(Experiment, RunReport)> {
        let exp = self.experiment().map_err(|e| crate::input_error(format!("{e:#}")))?;
        let device = device(&exp)?;
        let report = self.run(&exp, &device)?;
        Ok((exp, report))
    }

    /// Trains `exp` into the job's folder and writes its report.
    pub fn run(&self, exp: &Experiment, device: &Device) -> Result<RunReport> {
        let opts = TrainOptions {
            out: self.out.clone(),
            resume: self.resume,
            overwrite: self.overwrite,
            progress: self.progress,
        };
        let report = crate::train::train(exp, &opts, device)?;
        if let Err(e) = crate::html::refresh(&self.out, &Default::default(), device) {
            crate::notes::warn(format!("{}/report.html not written: {e:#}", self.out.display()));
        }
        Ok(report)
    }
}
