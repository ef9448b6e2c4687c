//! The attack options every scoring job takes, with their one set of defaults and one
//! validation: `rdml attack`, `rdml robustness`, `compare` and `embed --attack` on the command
//! line, `Run.attack`, `Run.robustness`, `rdml.attack` and `rdml.robustness` in Python. Errors name
//! the option as a field token (`⟨queries⟩`), which each front end words as its own.

use super::defaults;
use crate::attack::budget::{Norm, Pgd};
use crate::attack::method::Method;
use crate::attack::profile::{Overrides, ProfileName, resolve};
use crate::attack::spec::SpecBudget;
use anyhow::Result;
use std::path::PathBuf;

/// The budget (a profile changed by `eps`, `step`, `steps`, `norm`, `random_start`), how the
/// images are moved, and which queries are attacked with which seed. Read from JSON (the Python
/// package's keywords), a key left out takes its default here.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScoringOptions {
    pub profile: ProfileName,
    pub eps: Option<f32>,
    pub step: Option<f32>,
    pub steps: Option<usize>,
    /// `None`: the profile's.
    pub norm: Option<Norm>,
    /// `true` turns a random start on; profiles that have one keep it.
    pub random_start: bool,
    /// `white-box`, `nes[:…]` or `universal`.
    pub method: String,
    /// Items attacked: the first ones of the test split (or of the caller's images).
    pub queries: usize,
    /// Items attacked, and embedded, at once.
    pub batch: usize,
    /// Seed of the selections and random starts.
    pub seed: u64,
    /// Follow robrank's code where it differs from its definitions.
    pub robrank_compat: bool,
    /// Keep each attacked item's own values in the results ([`crate::attack::per_query`]).
    pub per_query: bool,
}

impl Default for ScoringOptions {
    fn default() -> Self {
        Self {
            profile: defaults::PROFILE.parse().expect("the default profile is a profile"),
            eps: None,
            step: None,
            steps: None,
            norm: None,
            random_start: false,
            method: defaults::METHOD.into(),
            queries: defaults::QUERIES,
            batch: defaults::BATCH,
            seed: defaults::SEED,
            robrank_compat: false,
            per_query: false,
        }
    }
}

impl ScoringOptions {
    /// The options checked once and resolved into what every scoring job runs with: the
    /// profile's budget changed by them and by an attack spec's own keys (which must agree with
    /// the options where both are given), the method parsed, the counts checked, and `repeats`
    /// (runs of the attack or suite) with them.
    pub fn resolve(&self, spec: SpecBudget, repeats: usize) -> Result<Resolved> {
        crate::ensure_input!(self.queries >= 1, "⟨queries⟩ must be ≥ 1");
        crate::ensure_input!(self.batch >= 1, "⟨batch⟩ must be ≥ 1");
        crate::ensure_input!(repeats >= 1, "⟨repeats⟩ must be ≥ 1");
        let method = crate::attack::registry::method(&self.method)
            .map_err(|e| crate::input_error(format!("⟨method⟩: {e:#}")))?;
        let flags = Overrides {
            eps: self.eps,
            step: self.step,
            steps: self.steps,
            norm: self.norm,
            random_start: self.random_start,
        };
        let pgd = resolve(self.profile, &flags, &spec.into(), self.robrank_compat)
            .map_err(|e| crate::input_error(format!("{e:#}")))?;
        Ok(Resolved {
            profile: self.profile,
            pgd,
            method,
            method_spec: self.method.clone(),
            queries: self.queries,
            batch: self.batch,
            seed: self.seed,
            robrank_compat: self.robrank_compat,
            per_query: self.per_query,
            repeats,
        })
    }
}

/// [`ScoringOptions`] resolved: what everything below the requests reads (nothing re-parsed,
/// no count re-checked). `queries`, `batch` and `repeats` are ≥ 1.
pub struct Resolved {
    /// The budget's profile, as the records name it.
    pub profile: ProfileName,
    pub pgd: Pgd,
    pub method: Box<dyn Method>,
    /// The method as the caller wrote it, as the records name it.
    pub method_spec: String,
    /// Items attacked: the first ones of the test split (or of the caller's images).
    pub queries: usize,
    pub batch: usize,
    pub seed: u64,
    pub robrank_compat: bool,
    pub per_query: bool,
    pub repeats: usize,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("profile", &self.profile)
            .field("pgd", &self.pgd)
            .field("method", &self.method.spec())
            .field("queries", &self.queries)
            .field("batch", &self.batch)
            .field("seed", &self.seed)
            .field("robrank_compat", &self.robrank_compat)
            .field("per_query", &self.per_query)
            .field("repeats", &self.repeats)
            .finish()
    }
}

/// What scoring a run folder takes besides the options.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunScoring {
    /// The test data, when not where the run's config says.
    pub data: Option<PathBuf>,
    /// Make the examples on this run's model, score them on the attacked run's.
    pub surrogate: Option<PathBuf>,
    pub repeats: usize,
    /// Attack and score the model as it infers with this batch-norm set.
    pub bn_set: usize,
    pub progress: bool,
    /// The ranks the work is split over (the caller's process group, not a request field).
    #[serde(skip)]
    pub ranks: crate::ranks::Ranks,
}

impl Default for RunScoring {
    fn default() -> Self {
        Self {
            data: None,
            surrogate: None,
            repeats: defaults::REPEATS,
            bn_set: 0,
            progress: true,
            ranks: Default::default(),
        }
    }
}
