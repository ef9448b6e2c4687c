//! Certified Recall@1 of a run folder's model: `rdml certify` and Python's `Run.certify`. The
//! record is kept in the run folder as `certify.json` (unless its model changed meanwhile), the
//! run's report rewritten with its curve (from the folder's records: no model loaded), and the
//! record written to `out` when given.

use crate::certify::options::CertifyOptions;
use crate::certify::record::{CertifyRecord, FILE};
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use std::path::PathBuf;

/// A certification asked for (read from JSON by these names).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertifyJob {
    /// A run folder written by `rdml train` or `rdml import`.
    pub model: PathBuf,
    /// The test data, when not where the run's config says.
    #[serde(default)]
    pub data: Option<PathBuf>,
    #[serde(default)]
    pub options: CertifyOptions,
    /// Also write the record here as JSON (checked before any work).
    #[serde(default)]
    pub out: Option<PathBuf>,
    #[serde(default)]
    pub overwrite: bool,
    #[serde(default = "crate::field::yes")]
    pub progress: bool,
    /// The ranks the copies are split over (the caller's process group, not a request field).
    #[serde(skip)]
    pub ranks: crate::ranks::Ranks,
}

/// The record, and whether it was kept in the run folder.
pub struct Certified {
    pub record: CertifyRecord,
    pub stored: bool,
}

impl CertifyJob {
    /// Checks the request (and `out`), opens the device with `device`, certifies the run's
    /// model, writes `out` and keeps the record in the run folder (a folder that cannot take it
    /// is a warning, as for `robustness.json`; a model retrained meanwhile is an error).
    pub fn run(&self, device: impl FnOnce() -> Result<Device>) -> Result<Certified> {
        let certification = self.options.resolve()?;
        // On ranks, rank 0 writes the files; every rank returns the record.
        let writes = self.ranks.rank() == 0;
        if let Some(o) = self.out.as_ref().filter(|_| writes) {
            crate::output::check(o, self.overwrite).context("⟨out⟩")?;
        }
        crate::run_dir::check_finished(&self.model)?;
        let device = device()?;
        let target = crate::target::Target::open(&self.model, self.data.as_deref(), 0, &device)?;
        let ctx = target.context_on(&device, false, self.options.batch, &self.ranks)?;
        let record = certification.run(&ctx, self.model.clone(), Some(target.digest.clone()), self.progress)?;
        if let Some(o) = self.out.as_ref().filter(|_| writes) {
            crate::output::write_json(o, &record, self.overwrite).context("⟨out⟩")?;
        }
        let stored = writes && crate::run_dir::keep_record(&self.model, Some(&target.digest), FILE, &record)?;
        if stored && let Err(e) = crate::html::write(&self.model) {
            crate::notes::warn(format!("{}/report.html not written: {e:#}", self.model.display()));
        }
        Ok(Certified { record, stored })
    }
}
