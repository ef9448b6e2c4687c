//! What a data set is asked to read: the `[data]` table's values it may use, and the synthetic
//! data set's own table (kept here, beside the request that carries it).

use anyhow::{Context as _, Result, ensure};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The `[data]` values a data set's loader reads.
pub struct DataRequest<'a> {
    /// `data.root` (each data set has its own default, or needs one).
    pub root: Option<PathBuf>,
    pub resize: usize,
    pub crop: usize,
    pub train_fraction: f64,
    /// The seed of any split made by rule.
    pub seed: u64,
    pub synthetic: &'a SyntheticConfig,
}

impl DataRequest<'_> {
    /// `data.root`, required: the data set `kind` has no default folder.
    pub fn need_root(&self, kind: &str) -> Result<PathBuf> {
        self.root
            .clone()
            .with_context(|| format!("data.root must name the folder of the {kind} data set"))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Item shape `[c, h, w]`; the paper uses 3×224×224.
    pub shape: [usize; 3],
    pub sigma: f64,
    pub train: usize,
    pub test: usize,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            shape: [3, 224, 224],
            sigma: 0.025,
            train: 508,
            test: 516,
        }
    }
}

impl SyntheticConfig {
    pub fn validate(&self) -> Result<()> {
        const MAX_BYTES: u64 = 16 << 30;
        ensure!(
            self.shape.iter().all(|&d| d > 0),
            "data.synthetic.shape entries must be > 0"
        );
        ensure!(
            self.sigma > 0.0 && self.sigma.is_finite(),
            "data.synthetic.sigma must be > 0"
        );
        ensure!(
            self.train >= 4 && self.test >= 4,
            "data.synthetic.train and .test must be ≥ 4"
        );
        // The points are held in memory as f32: a bound that fails here, not in an allocation
        // that aborts the process (a shape or a count with extra zeros).
        let per: u64 = self.shape.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
        let bytes = per
            .saturating_mul(self.train as u64 + self.test as u64)
            .saturating_mul(4);
        ensure!(
            bytes <= MAX_BYTES,
            "data.synthetic: {} train + {} test points of shape {:?} take {} GiB, beyond rdml's limit of {} GiB",
            self.train,
            self.test,
            self.shape,
            bytes >> 30,
            MAX_BYTES >> 30
        );
        Ok(())
    }
}
