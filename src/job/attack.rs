//! One attack on a run folder's model: `rdml attack` and Python's `Run.attack`.

use crate::attack::adversarial::{AdversarialSink, ExampleWriter};
use crate::attack::budget::Pgd;
use crate::attack::result::AttackResult;
use crate::scoring::options::{RunScoring, ScoringOptions};
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;

/// An attack asked for (read from JSON by the Python package, by these names).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttackJob {
    /// A run folder written by `rdml train` or `rdml import`.
    pub model: PathBuf,
    /// The attack, as `rdml attack` names it (robrank's spec strings read, their budget keys
    /// included).
    pub attack: String,
    #[serde(default)]
    pub options: ScoringOptions,
    #[serde(default)]
    pub run: RunScoring,
    /// A folder for the first run's adversarial images (PNG) and their index.
    #[serde(default)]
    pub save_examples: Option<PathBuf>,
}

/// What the attack gave: each run (one unless repeated), the budget it ran with, and how many
/// images were saved.
pub struct Attacked {
    pub runs: Vec<AttackResult>,
    pub pgd: Pgd,
    pub saved: Option<usize>,
}

impl Attacked {
    /// The result as `rdml attack --json` prints it and `Run.attack` returns it: the one run, or
    /// every run and each score's mean and sample std.
    pub fn json(&self) -> Result<serde_json::Value> {
        crate::scoring::model::attack_json(&self.runs)
    }
}

impl AttackJob {
    /// Checks the request, opens the device with `device` (only then), and runs the attack.
    pub fn run(&self, device: impl FnOnce() -> Result<Device>) -> Result<Attacked> {
        let (unit, spec_budget) = crate::attack::registry::attack_with_budget(&self.attack)
            .map_err(|e| crate::input_error(format!("{e:#}")))?;
        let options = self.options.resolve(spec_budget, self.run.repeats)?;
        crate::ensure_input!(
            !self.run.ranks.split() || self.save_examples.is_none(),
            "⟨save_examples⟩ writes one process's images: attack on one rank (without a group) to save them"
        );
        crate::ensure_input!(
            options.repeats == 1 || self.save_examples.is_none(),
            "⟨save_examples⟩ writes the images of one run: use it with ⟨repeats⟩ 1"
        );
        let mut writer = self
            .save_examples
            .as_deref()
            .map(|d| ExampleWriter::new(d, &unit.spec()))
            .transpose()?;
        // The run folder before the device: a wrong folder is said at once.
        crate::run_dir::check_finished(&self.model)?;
        let device = device()?;
        let session = crate::scoring::open_run(&self.model, &self.run, &options, &device)?;
        let sink = writer.as_mut().map(|w| w as &mut dyn AdversarialSink);
        let runs = session.attack(unit.as_ref(), sink)?;
        let saved = writer.map(ExampleWriter::finish).transpose()?;
        Ok(Attacked {
            runs,
            pgd: options.pgd,
            saved,
        })
    }
}
