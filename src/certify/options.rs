//! The options of a certification, with their one set of defaults and one validation, whatever
//! the front end (`rdml certify`, `Run.certify`, `rdml.certify`), and the one place its record
//! is made.

use super::record::{CertifyRecord, Setting};
use super::{Method, Smoothing, certify};
use crate::attack::context::Context;
use anyhow::Result;
use std::path::PathBuf;

/// The defaults: Cohen, Rosenfeld and Kolter's `n₀ = 100` and `α = 0.001` (ICML 2019), 10,000
/// copies for the bound and 500 queries (issue 53's setting; Cohen's is 100,000), σ the middle
/// of the literature's {0.12, 0.25, 0.5}; centre smoothing's `n = 10,000` copies that pick the
/// centre and `Δ = 0.05` (Kumar and Goldstein's code).
pub mod defaults {
    pub const METHOD: &str = "cohen";
    pub const SIGMA: f32 = 0.25;
    pub const SELECT: usize = 100;
    pub const CENTER_SELECT: usize = 10_000;
    pub const DELTA: f64 = 0.05;
    pub const SAMPLES: usize = 10_000;
    pub const ALPHA: f64 = 0.001;
    pub const RADII: [f64; 3] = [0.1, 0.25, 0.5];
    pub const QUERIES: usize = 500;
    pub const BATCH: usize = 256;
    pub const SEED: u64 = 0;
}

/// Which smoothed retrieval is certified, as the front ends name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MethodName {
    /// Cohen, Rosenfeld and Kolter's CERTIFY of the noisy query's top-1 label.
    Cohen,
    /// Kumar and Goldstein's centre smoothing of the query's embedding, then its 1-NN.
    Center,
}

impl std::str::FromStr for MethodName {
    type Err = anyhow::Error;
    /// `cohen` or `center`, as `--method` and the Python package spell them.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cohen" => Ok(Self::Cohen),
            "center" => Ok(Self::Center),
            _ => anyhow::bail!("method = {s:?}: expected \"cohen\" or \"center\""),
        }
    }
}

/// How a model is certified (read from JSON by these names; a key left out takes its default).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CertifyOptions {
    /// `cohen` or `center` ([`MethodName`]).
    pub method: MethodName,
    /// σ of the noise, in pixels of [0, 1] images.
    pub sigma: f32,
    /// Noisy copies per query that pick its label (`n₀`), or its centre (and as many again that
    /// check it); `None`: the method's default.
    pub select: Option<usize>,
    /// Centre smoothing's Δ (`None`: its default; refused for Cohen's).
    pub delta: Option<f64>,
    /// Noisy copies per query that bound its probability (`n`).
    pub samples: usize,
    pub alpha: f64,
    /// The ℓ2 radii certified Recall@1 is reported at.
    pub radii: Vec<f64>,
    /// The first `queries` items are certified.
    pub queries: usize,
    /// Noisy copies embedded at once.
    pub batch: usize,
    pub seed: u64,
    /// Keep each query's certificate in the record.
    pub per_query: bool,
}

impl Default for CertifyOptions {
    fn default() -> Self {
        Self {
            method: MethodName::Cohen,
            sigma: defaults::SIGMA,
            select: None,
            delta: None,
            samples: defaults::SAMPLES,
            alpha: defaults::ALPHA,
            radii: defaults::RADII.to_vec(),
            queries: defaults::QUERIES,
            batch: defaults::BATCH,
            seed: defaults::SEED,
            per_query: false,
        }
    }
}

impl CertifyOptions {
    /// The smoothing asked for, every option checked and named as the front end names it.
    pub(super) fn smoothing(&self) -> Result<Smoothing> {
        crate::ensure_input!(
            self.sigma.is_finite() && self.sigma > 0.0,
            "⟨sigma⟩ must be a number > 0 (the noise's standard deviation, in pixels of [0, 1] images), not {}",
            self.sigma
        );
        let select = self.select.unwrap_or(match self.method {
            MethodName::Cohen => defaults::SELECT,
            MethodName::Center => defaults::CENTER_SELECT,
        });
        crate::ensure_input!(select >= 1, "⟨select⟩ must be ≥ 1");
        let method = match self.method {
            MethodName::Cohen => {
                crate::ensure_input!(
                    self.delta.is_none(),
                    "⟨delta⟩ is centre smoothing's; give ⟨method⟩ center, or leave ⟨delta⟩ out"
                );
                Method::Cohen
            }
            MethodName::Center => {
                let delta = self.delta.unwrap_or(defaults::DELTA);
                crate::ensure_input!(delta > 0.0 && delta < 0.5, "⟨delta⟩ must be in (0, 0.5), not {delta}");
                Method::Center { delta }
            }
        };
        let smoothing = Smoothing {
            sigma: self.sigma,
            select,
            samples: self.samples,
            alpha: self.alpha,
            method,
        };
        if let Method::Center { delta } = method {
            // Settings under which every query abstains or none is certified: refused, not run.
            let d1 = super::center::check_slack(&smoothing);
            crate::ensure_input!(
                d1.is_finite() && d1 <= delta,
                "⟨select⟩ {select} is too few for centre smoothing at ⟨alpha⟩ {} and ⟨delta⟩ {delta}: \
                 the centre's check would carry a slack of {d1:.3} > Δ, and every query would abstain; \
                 give at least {}",
                self.alpha,
                ((4.0 / self.alpha).ln() / (2.0 * delta * delta)).ceil()
            );
            let slack = super::center::quantile_slack(&smoothing);
            crate::ensure_input!(
                slack.is_finite() && 1.0 - slack > 0.5 + delta,
                "⟨samples⟩ {} is too few for centre smoothing at ⟨alpha⟩ {}: its quantile's slack {slack:.3} \
                 leaves no quantile above 1/2 + Δ, and no query could be certified",
                self.samples,
                self.alpha
            );
        }
        crate::ensure_input!(self.samples >= 1, "⟨samples⟩ must be ≥ 1");
        crate::ensure_input!(
            self.alpha > 0.0 && self.alpha < 0.5,
            "⟨alpha⟩ must be in (0, 0.5), not {}",
            self.alpha
        );
        crate::ensure_input!(!self.radii.is_empty(), "⟨radii⟩: give at least one radius");
        for &r in &self.radii {
            crate::ensure_input!(r.is_finite() && r >= 0.0, "⟨radii⟩: {r} is not a radius ≥ 0");
        }
        crate::ensure_input!(self.queries >= 1, "⟨queries⟩ must be ≥ 1");
        crate::ensure_input!(self.batch >= 1, "⟨batch⟩ must be ≥ 1");
        Ok(smoothing)
    }

    /// The options checked once and resolved into what runs ([`ResolvedCertify::run`]): every
    /// front end's certification resolves here, before any work, and nothing below checks again.
    pub fn resolve(&self) -> Result<ResolvedCertify<'_>> {
        Ok(ResolvedCertify {
            smoothing: self.smoothing()?,
            options: self,
        })
    }
}

/// [`CertifyOptions`] checked, with their smoothing: the certification to run.
pub struct ResolvedCertify<'a> {
    options: &'a CertifyOptions,
    smoothing: Smoothing,
}

impl ResolvedCertify<'_> {
    /// Certifies `ctx`'s model on its query set and makes the record, naming `model` (a run
    /// folder, or empty) and the digest of its weights.
    pub fn run(
        &self,
        ctx: &Context,
        model: PathBuf,
        model_digest: Option<String>,
        progress: bool,
    ) -> Result<CertifyRecord> {
        let (o, smoothing) = (self.options, &self.smoothing);
        let t0 = std::time::Instant::now();
        let c = certify(ctx, o.queries, smoothing, o.batch, o.seed, progress)?;
        // On ranks, the slowest rank's time: every rank's record the same.
        let seconds = ctx
            .ranks
            .gather(&t0.elapsed().as_secs_f64())?
            .into_iter()
            .fold(0.0, f64::max);
        Ok(CertifyRecord::of(
            c,
            Setting {
                model,
                model_digest,
                smoothing,
                seed: o.seed,
                queries: o.queries,
                radii: &o.radii,
                per_query: o.per_query,
                seconds,
            },
        ))
    }
}
