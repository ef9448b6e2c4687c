//! robrank's ERS suite on a run folder's model: `rdml robustness` and Python's `Run.robustness`.
//! The record is kept in the run folder (unless its model changed meanwhile) and the run's report
//! refreshed; a report that cannot be written is a warning, since the record already is.

use crate::attack::budget::Pgd;
use crate::scoring::Scored;
use crate::scoring::options::{RunScoring, ScoringOptions};
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use std::path::PathBuf;

/// The suite asked for (read from JSON by the Python package, by these names).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RobustnessJob {
    /// A run folder written by `rdml train` or `rdml import`.
    pub model: PathBuf,
    #[serde(default)]
    pub options: ScoringOptions,
    #[serde(default)]
    pub run: RunScoring,
    /// Also write the record here as JSON (checked before any work).
    #[serde(default)]
    pub out: Option<PathBuf>,
    /// Replace `out` when it exists (never a run's own file).
    #[serde(default)]
    pub overwrite: bool,
}

/// What the suite gave: its record and runs, the budget, whether the record was kept in the run
/// folder, and the report page written.
pub struct Assessed {
    pub scored: Scored,
    pub pgd: Pgd,
    pub stored: bool,
    pub report: Option<PathBuf>,
}

impl RobustnessJob {
    /// Checks the request (and `out`), opens the device with `device`, runs the suite, writes
    /// `out`, keeps the record in the run folder and refreshes its report.
    pub fn run(&self, device: impl FnOnce() -> Result<Device>) -> Result<Assessed> {
        let options = self.options.resolve(Default::default(), self.run.repeats)?;
        // On ranks, rank 0 writes the files; every rank returns the record.
        let writes = self.run.ranks.rank() == 0;
        if let Some(o) = self.out.as_ref().filter(|_| writes) {
            crate::output::check(o, self.overwrite).context("⟨out⟩")?;
        }
        // The run folder before the device: a wrong folder is said at once.
        crate::run_dir::check_finished(&self.model)?;
        let device = device()?;
        let scored = crate::scoring::open_run(&self.model, &self.run, &options, &device)?.robustness()?;
        if !scored.normalized {
            crate::notes::warn(
                "the embeddings are not L2-normalised; ES:D (and so ERS) is only meaningful on the unit sphere",
            );
        }
        if let Some(o) = self.out.as_ref().filter(|_| writes) {
            crate::output::write_json(o, &scored.record, self.overwrite).context("⟨out⟩")?;
        }
        let stored = writes && scored.store()?;
        let report = if stored { self.refresh_report(&device) } else { None };
        Ok(Assessed {
            scored,
            pgd: options.pgd,
            stored,
            report,
        })
    }

    fn refresh_report(&self, device: &Device) -> Option<PathBuf> {
        let opts = crate::html::ReportOptions {
            data: self.run.data.clone(),
            ..Default::default()
        };
        match crate::html::refresh(&self.model, &opts, device) {
            Ok(p) => Some(p),
            Err(e) => {
                let text = format!("{}/report.html not written: {e:#}", self.model.display());
                crate::notes::warn(text);
                None
            }
        }
    }
}
