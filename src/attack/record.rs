//! The robustness suite's record: what `rdml robustness` and `rdml compare` write into a run
//! folder (and to `--out`), and what the report reads back. One type, one file name.

use super::budget::Pgd;
use super::robustness::Robustness;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The record's name in a run folder.
pub const FILE: &str = crate::run_dir::ROBUSTNESS;

/// One suite run on one model. Every field but `table` may be missing (files of earlier
/// versions, or written by hand) and then reads as absent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessRecord {
    /// The run folder scored (empty in records that did not say).
    #[serde(default, serialize_with = "crate::output::path_text")]
    pub model: PathBuf,
    /// The digest of the weights the table was computed on ([`crate::run_dir::model_digest`]).
    #[serde(default)]
    pub model_digest: Option<String>,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
    /// The surrogate run of a transfer attack.
    #[serde(default, serialize_with = "crate::output::opt_path_text")]
    pub surrogate: Option<PathBuf>,
    #[serde(default)]
    pub pgd: Option<Pgd>,
    /// The queries asked for.
    #[serde(default)]
    pub queries: Option<usize>,
    /// The queries attacked: those asked for, or every image when fewer were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries_used: Option<usize>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub robrank_compat: bool,
    /// The images of the gallery the queries were ranked among (none: the test set ranked
    /// among itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gallery: Option<usize>,
    /// What crossed between rdml and a model held outside it, over the suite (none for rdml's
    /// own networks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<crate::attack::oracle::Crossed>,
    pub table: Robustness,
    /// With `--repeats R`: every run and each column's mean and sample std.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<serde_json::Value>,
}

impl RobustnessRecord {
    /// The budget in words, for the report.
    pub fn budget_words(&self) -> String {
        pgd_words(self.pgd.as_ref())
    }
}

/// A PGD budget in words (`ε 0.3020, 32 steps of 0.0118, Linf`), or that none was recorded.
pub fn pgd_words(pgd: Option<&Pgd>) -> String {
    match pgd {
        Some(p) => format!(
            "ε {:.4}, {} steps of {:.4}, {:?}{}",
            p.eps,
            p.steps,
            p.step,
            p.norm,
            if p.random_start { ", random start" } else { "" }
        ),
        None => "budget not recorded".into(),
    }
}
