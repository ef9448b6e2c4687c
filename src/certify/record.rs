//! The certification's record: what `rdml certify` keeps in a run folder (`certify.json`, beside
//! `robustness.json`) and prints with `--json`, and what `rdml.certify` returns.

use super::{Certification, QueryCertificate, Smoothing};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The record's name in a run folder.
pub const FILE: &str = crate::run_dir::CERTIFY;

/// One certification of one model. Percentages are of the queries certified (those with another
/// item of their class among the ranked images).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CertifyRecord {
    /// The run folder certified (empty for a model outside rdml).
    #[serde(default, serialize_with = "crate::output::path_text")]
    pub model: PathBuf,
    /// The digest of the weights certified ([`crate::run_dir::model_digest`]).
    #[serde(default)]
    pub model_digest: Option<String>,
    pub sigma: f32,
    /// Noisy copies per query that picked its label, and that bounded its probability.
    pub select: usize,
    pub samples: usize,
    pub alpha: f64,
    pub seed: u64,
    /// The queries asked for, those certified and those left out as lone.
    pub queries: usize,
    pub queries_used: usize,
    pub lone: usize,
    /// Certified Recall@1 at each radius asked (ℓ2, pixels of [0, 1] images), keyed by the
    /// radius as written (`"0.25"`).
    pub certified: serde_json::Map<String, serde_json::Value>,
    /// Recall@1 of the smoothed model's answer (the majority label of the noisy copies), without
    /// a certificate.
    pub clean: f64,
    /// Queries whose bound was at most 1/2: no label certified at any radius.
    pub abstained: f64,
    pub seconds: f64,
    /// Each query's certificate, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_query: Option<Vec<QueryCertificate>>,
}

/// What the record says was certified, and how.
pub struct Setting<'a> {
    pub model: PathBuf,
    pub model_digest: Option<String>,
    pub smoothing: &'a Smoothing,
    pub seed: u64,
    pub queries: usize,
    pub radii: &'a [f64],
    pub per_query: bool,
    pub seconds: f64,
}

impl CertifyRecord {
    /// The record of `c`, certified as `s` says.
    pub fn of(c: Certification, s: Setting) -> Self {
        let n = c.rows.len().max(1) as f64;
        let share = |f: &dyn Fn(&QueryCertificate) -> bool| 100.0 * c.rows.iter().filter(|q| f(q)).count() as f64 / n;
        let certified = s
            .radii
            .iter()
            .map(|&r| (format!("{r}"), serde_json::Value::from(share(&|q| q.certified_at(r)))))
            .collect();
        Self {
            model: s.model,
            model_digest: s.model_digest,
            sigma: s.smoothing.sigma,
            select: s.smoothing.select,
            samples: s.smoothing.samples,
            alpha: s.smoothing.alpha,
            seed: s.seed,
            queries: s.queries,
            queries_used: c.queries,
            lone: c.lone,
            certified,
            clean: share(&|q| q.majority == q.label),
            abstained: share(&|q| q.radius.is_none()),
            seconds: s.seconds,
            per_query: s.per_query.then_some(c.rows),
        }
    }
}
