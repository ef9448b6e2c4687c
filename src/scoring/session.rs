//! One scoring session: the attacked model and the model that makes the examples (itself, or a
//! surrogate) on one query set and gallery, with the options resolved once. Every front end's
//! attack and suite goes through it — `rdml attack`, `rdml robustness`, `rdml compare`,
//! `rdml embed --attack`, quickstart's attack, `Run.attack`, `Run.robustness`, `rdml.attack`,
//! `rdml.robustness` and `rdml.Attack` — so the robustness record is built in one place
//! ([`Session::robustness`]) and kept by one policy ([`Scored::store`]).

use super::options::Resolved;
use crate::attack::adversarial::AdversarialSink;
use crate::attack::record::{FILE, RobustnessRecord};
use crate::attack::result::AttackResult;
use crate::attack::robustness::{Robustness, RobustnessSpread, robustness_spread};
use crate::attack::suite::{Context, Setup, robustness_repeated, run_repeated, run_saving};
use crate::attack::unit::Attack;
use anyhow::Result;
use std::path::PathBuf;

/// What a record says was scored: the run folder (empty for a model outside rdml), the digest of
/// its weights, and the surrogate of a transfer attack.
#[derive(Debug, Clone, Default)]
pub struct Scoree {
    pub model: PathBuf,
    pub digest: Option<String>,
    pub surrogate: Option<PathBuf>,
}

/// The attacked model's context, the surrogate's (a transfer attack), the resolved options, and
/// what the record names.
pub struct Session<'o> {
    pub target: Context,
    pub surrogate: Option<Context>,
    pub options: &'o Resolved,
    pub scoree: Scoree,
    /// Draw a progress bar per attack (and a line per finished attack of the suite).
    pub progress: bool,
}

/// The suite's record (its table is the first run's), every run, each column's spread, and
/// whether the embeddings are L2-normalised (ES:D, and so ERS, assume the unit sphere).
pub struct Scored {
    pub record: RobustnessRecord,
    pub runs: Vec<Robustness>,
    pub spread: RobustnessSpread,
    pub normalized: bool,
}

impl<'o> Session<'o> {
    /// Who attacks whom, as the options say; `queries` items at most.
    fn setup(&self, queries: usize) -> Setup<'_> {
        let o = self.options;
        Setup {
            target: &self.target,
            attacker: self.surrogate.as_ref().unwrap_or(&self.target),
            method: o.method.as_ref(),
            pgd: o.pgd,
            queries,
            batch: o.batch,
            seed: o.seed,
            per_query: o.per_query,
            progress: self.progress,
        }
    }

    /// `attack` run `options.repeats` times, the first run's adversarial images given to `sink`.
    /// A single run's result says what crossed to a model held outside rdml ([`Session::route`]).
    pub fn attack(&self, attack: &dyn Attack, sink: Option<&mut dyn AdversarialSink>) -> Result<Vec<AttackResult>> {
        let mut runs = run_repeated(&self.setup(self.options.queries), attack, self.options.repeats, sink)?;
        if let [one] = runs.as_mut_slice() {
            one.route = self.route()?;
        }
        Ok(runs)
    }

    /// What crossed between rdml and the models held outside it (the target and a surrogate)
    /// so far, on every rank of a split job; `None` where both are rdml's own networks.
    pub fn route(&self) -> Result<Option<crate::attack::oracle::Crossed>> {
        let of = |c: &Context| c.model.crossed();
        let s = self.surrogate.as_ref().and_then(of);
        let this = match (of(&self.target), s) {
            (Some(a), Some(b)) => Some(a.plus(b)),
            (a, b) => a.or(b),
        };
        crate::attack::crossing::across(&self.target.ranks, this)
    }

    /// `attack` run once, its adversarial images given to `sink`; `every`: every item the
    /// attack moves is attacked, whatever `options.queries` says.
    pub fn attack_once(
        &self,
        attack: &dyn Attack,
        every: bool,
        sink: Option<&mut dyn AdversarialSink>,
    ) -> Result<AttackResult> {
        let queries = if every { usize::MAX } else { self.options.queries };
        let mut result = run_saving(&self.setup(queries), attack, sink)?;
        result.route = self.route()?;
        Ok(result)
    }

    /// robrank's ERS suite run `options.repeats` times, and its record: the one place a
    /// robustness record is built.
    pub fn robustness(&self) -> Result<Scored> {
        let o = self.options;
        let runs = robustness_repeated(&self.setup(o.queries), o.repeats)?;
        let spread = robustness_spread(&runs);
        let record = RobustnessRecord {
            model: self.scoree.model.clone(),
            model_digest: self.scoree.digest.clone(),
            profile: Some(o.profile.name().to_string()),
            method: Some(o.method_spec.clone()),
            surrogate: self.scoree.surrogate.clone(),
            pgd: Some(o.pgd),
            queries: Some(o.queries),
            queries_used: Some(o.queries.min(self.target.n())),
            seed: Some(o.seed),
            robrank_compat: o.robrank_compat,
            gallery: self.target.gallery.as_ref().map(|g| g.set.len()),
            route: self.route()?,
            table: runs[0].clone(),
            repeats: (o.repeats > 1).then(|| serde_json::json!({"runs": runs, "mean_std": spread})),
        };
        Ok(Scored {
            record,
            runs,
            spread,
            normalized: self.target.clean.is_normalized(),
        })
    }
}

impl Scored {
    /// Keeps the record in the run folder, the one policy of every front end and of `compare`:
    /// refused when the model changed meanwhile (the numbers describe other weights), a warning
    /// when the folder cannot take it (the table is still the caller's). Returns whether it was
    /// written.
    pub fn store(&self) -> Result<bool> {
        let r = &self.record;
        crate::run_dir::keep_record(&r.model, r.model_digest.as_deref(), FILE, r)
    }
}
