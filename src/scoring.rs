//! A run folder attacked and scored, as `rdml attack` and `rdml robustness` do it (and the Python
//! package's `Run.attack` and `Run.robustness`): the run opened as a target, the budget, the
//! method, an optional surrogate for a transfer attack, repeats; the suite's record stored in the
//! run folder.

pub mod options;

use crate::attack::budget::Pgd;
use crate::attack::examples::AdversarialSink;
use crate::attack::record::{FILE, RobustnessRecord};
use crate::attack::robustness::{Robustness, RobustnessSpread, robustness_spread};
use crate::attack::score::AttackResult;
use crate::attack::suite::{Context, Setup, robustness_repeated, run_repeated};
use crate::attack::{registry, unit::Attack};
use crate::target::Target;
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use std::path::{Path, PathBuf};

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

/// How a run is attacked: what `rdml attack` and `rdml robustness` take besides the run.
#[derive(Debug, Clone)]
pub struct Scoring {
    /// The test data, when not where the run's config says.
    pub data: Option<PathBuf>,
    /// The budget's profile name (for the record) and the resolved budget.
    pub profile: String,
    pub pgd: Pgd,
    /// How the images are moved (`white-box`, `nes[:…]`, `universal`).
    pub method: String,
    pub queries: usize,
    pub batch: usize,
    pub seed: u64,
    pub robrank_compat: bool,
    /// Make the examples on this run's model, score them on the attacked run's.
    pub surrogate: Option<PathBuf>,
    /// Run the attack or the suite this many times (seeds [`crate::attack::score::repeat_seed`]).
    pub repeats: usize,
    /// Attack and score the model as it infers with this batch-norm set.
    pub bn_set: usize,
    pub progress: bool,
    /// The front end that asked: how its notes name options (`--data` / `data=`).
    pub words: crate::field::Words,
}

/// The run in `dir` opened as a target and its attack context, and the surrogate's context.
struct Opened {
    target: Target,
    ctx: Context,
    surrogate: Option<Context>,
}

fn open(dir: &Path, s: &Scoring, device: &Device) -> Result<Opened> {
    anyhow::ensure!(s.repeats >= 1, "⟨repeats⟩ must be ≥ 1");
    anyhow::ensure!(s.queries >= 1, "⟨queries⟩ must be ≥ 1");
    anyhow::ensure!(s.batch >= 1, "⟨batch⟩ must be ≥ 1");
    let target = Target::open(dir, s.data.as_deref(), s.bn_set, device)?;
    if s.data.is_none()
        && let Some(note) = imported_data_note(dir, &target)
    {
        eprintln!("{}", crate::field::render(&note, s.words));
    }
    let ctx = target.context(device, s.robrank_compat, s.batch)?;
    let surrogate = match &s.surrogate {
        Some(sur) => {
            let set = &target.run.test.query;
            let (_, net) = crate::train::load_model(sur, set.item_shape(), device).context("⟨surrogate⟩")?;
            Some(Context::embedded_by(&net, set, s.batch, device, s.robrank_compat)?)
        }
        None => None,
    };
    Ok(Opened { target, ctx, surrogate })
}

/// What an imported run is scored on when it was imported without a config: its architecture's
/// default config's data, which the user may not have meant.
fn imported_data_note(dir: &Path, target: &Target) -> Option<String> {
    let bytes = std::fs::read(dir.join(crate::run_dir::IMPORT)).ok()?;
    let record: crate::model::import::ImportRecord = serde_json::from_slice(&bytes).ok()?;
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
        "note: {} was imported without a config, so it is scored on its default config's data: {}{root} \
         ({} test items). Give the data with ⟨data⟩, import with ⟨config⟩, or score \
         the model on your own images with rdml.robustness(run, images, labels) in Python.",
        dir.display(),
        serde_json::to_value(data.dataset).ok()?.as_str()?,
        target.run.test.query.len()
    ))
}

/// Runs `attack` on the run in `dir` `s.repeats` times, the first run's adversarial images given
/// to `sink`.
pub fn attack(
    dir: &Path,
    attack: &dyn Attack,
    s: &Scoring,
    device: &Device,
    sink: Option<&mut dyn AdversarialSink>,
) -> Result<Vec<AttackResult>> {
    let method = registry::method(&s.method)?;
    let o = open(dir, s, device)?;
    let setup = setup(&o, s, method.as_ref());
    run_repeated(&setup, attack, s.repeats, sink)
}

/// The suite's record of a run: its table (the first run's), and with repeats every run and
/// each column's spread.
pub struct Scored {
    pub record: RobustnessRecord,
    pub runs: Vec<Robustness>,
    pub spread: RobustnessSpread,
    /// Whether the embeddings are L2-normalised (ES:D, and so ERS, assume the unit sphere).
    pub normalized: bool,
}

/// Runs robrank's ERS suite on the run in `dir` and stores its record in the folder
/// ([`FILE`]), unless its model changed meanwhile.
pub fn robustness(dir: &Path, s: &Scoring, device: &Device) -> Result<Scored> {
    let method = registry::method(&s.method)?;
    let o = open(dir, s, device)?;
    let normalized = o.ctx.clean.is_normalized();
    let runs = robustness_repeated(&setup(&o, s, method.as_ref()), s.repeats)?;
    let spread = robustness_spread(&runs);
    let record = RobustnessRecord {
        model: dir.to_path_buf(),
        model_digest: Some(o.target.digest.clone()),
        profile: Some(s.profile.clone()),
        method: Some(s.method.clone()),
        surrogate: s.surrogate.clone(),
        pgd: Some(s.pgd),
        queries: Some(s.queries),
        seed: Some(s.seed),
        robrank_compat: s.robrank_compat,
        gallery: None,
        table: runs[0].clone(),
        repeats: (s.repeats > 1).then(|| serde_json::json!({"runs": runs, "mean_std": spread})),
    };
    Ok(Scored {
        record,
        runs,
        spread,
        normalized,
    })
}

impl Scored {
    /// Checks that the scored run's model is still the one the suite read.
    pub fn check_unchanged(&self) -> Result<()> {
        match &self.record.model_digest {
            Some(d) => crate::run_dir::check_unchanged(&self.record.model, d, FILE),
            None => Ok(()),
        }
    }

    /// Writes the record into the scored run's folder.
    pub fn write(&self) -> Result<()> {
        crate::run_dir::put_json(&self.record.model, FILE, &self.record)
    }

    /// Keeps the record in the run folder, the one policy of every front end: refused when the
    /// model changed meanwhile (the numbers describe other weights), a warning when the folder
    /// cannot take it (the table is still the caller's). Returns whether it was written.
    pub fn store(&self) -> Result<bool> {
        self.check_unchanged()?;
        match self.write() {
            Ok(()) => Ok(true),
            Err(e) => {
                eprintln!("warning: the run folder's robustness.json not written: {e:#}");
                Ok(false)
            }
        }
    }
}

fn setup<'a>(o: &'a Opened, s: &Scoring, method: &'a dyn crate::attack::method::Method) -> Setup<'a> {
    Setup {
        target: &o.ctx,
        attacker: o.surrogate.as_ref().unwrap_or(&o.ctx),
        method,
        pgd: s.pgd,
        queries: s.queries,
        batch: s.batch,
        seed: s.seed,
        progress: s.progress,
    }
}
