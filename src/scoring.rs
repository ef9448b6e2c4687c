//! Scoring: a model attacked and its robustness measured, written once for every front end.
//! - [`options`]: the options every attack and suite takes, resolved once ([`options::Resolved`]);
//! - [`session`]: the attacked model and the attacker on one query set, with `attack()` and
//!   `robustness()`, the one place a robustness record is built and the one policy that keeps it;
//! - this file: a run folder's session ([`open_run`]: `rdml attack`, `rdml robustness`,
//!   `compare`, `embed --attack`, quickstart's attack, `Run.attack`, `Run.robustness`);
//! - [`model`]: a model held outside rdml, on the caller's images (`rdml.robustness`,
//!   `rdml.attack`, `rdml.Attack`), with `images` (the caller's labelled arrays, checked once).

mod images;
pub mod model;
pub mod options;
pub mod session;

use crate::attack::suite::Context;
use crate::target::Target;
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use options::{Resolved, RunScoring};
pub use session::{Scored, Scoree, Session};
use std::path::Path;

/// The defaults of every attack and suite request, whatever the front end (`rdml attack`,
/// `rdml robustness`, `compare`, `embed --attack`, `Run.attack`, `Run.robustness`,
/// `rdml.attack`, `rdml.robustness`): defined here once, read by clap and by the binding.
pub mod defaults {
    /// The budget profile.
    pub const PROFILE: &str = "rob28";
    /// How the adversarial images are made.
    pub const METHOD: &str = "white-box";
    /// Test items attacked (the first ones of the test split), for one attack and for the suite.
    pub const QUERIES: usize = 1024;
    /// Items attacked (and embedded) at once.
    pub const BATCH: usize = 128;
    /// Seed of the selections and random starts.
    pub const SEED: u64 = 0;
    /// Runs of the attack or suite.
    pub const REPEATS: usize = 1;
}

/// A run folder's session: the run in `dir` opened as a target (its test split from `run.data`
/// when given, inferring with batch-norm set `run.bn_set`), and `run.surrogate`'s network on the
/// same test set.
pub fn open_run<'o>(dir: &Path, run: &RunScoring, options: &'o Resolved, device: &Device) -> Result<Session<'o>> {
    let target = Target::open(dir, run.data.as_deref(), run.bn_set, device)?;
    if run.data.is_none()
        && let Some(note) = imported_data_note(dir, &target)
    {
        crate::notes::note(note);
    }
    let ctx = target.context_on(device, options.robrank_compat, options.batch, &run.ranks)?;
    let surrogate = match &run.surrogate {
        Some(sur) => {
            let set = &target.run.test.query;
            let (_, net) = crate::train::load_model(sur, set.item_shape(), device).context("⟨surrogate⟩")?;
            let oracle = std::sync::Arc::new(crate::attack::oracle::Net::new(&net, 0));
            Some(Context::of_ranked(
                oracle,
                set,
                (options.batch, &run.ranks),
                device,
                options.robrank_compat,
            )?)
        }
        None => None,
    };
    Ok(Session {
        target: ctx,
        surrogate,
        options,
        scoree: Scoree {
            model: dir.to_path_buf(),
            digest: Some(target.digest),
            surrogate: run.surrogate.clone(),
        },
        progress: run.progress,
    })
}

/// What an imported run is scored on when it was imported without a config: its architecture's
/// default config's data, which the user may not have meant.
fn imported_data_note(dir: &Path, target: &Target) -> Option<String> {
    let record: crate::model::import::ImportRecord = crate::read::record(&dir.join(crate::run_dir::IMPORT))?;
    if !record.default_config {
        return None;
    }
    let data = &target.run.exp.data;
    let root = data
        .root
        .as_ref()
        .map(|r| format!(" in {}", r.display()))
        .unwrap_or_default();
    Some(format!(
        "{} was imported without a config, so it is scored on its default config's data: {}{root} ({} test \
         items). Give the data with ⟨data⟩, or import it again with ⟨config⟩.",
        dir.display(),
        serde_json::to_value(data.dataset).ok()?.as_str()?,
        target.run.test.query.len()
    ))
}
