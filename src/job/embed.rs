//! A run's embeddings of a split, clean or attacked: `rdml embed` and Python's `Run.embed_split`.

use crate::embed::{Exported, Split};
use crate::scoring::options::ScoringOptions;
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;

/// The embeddings asked for (read from JSON by the Python package, by these names).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedJob {
    /// A run folder written by `rdml train` or `rdml import`.
    pub model: PathBuf,
    /// The data, when not where the run's config says.
    #[serde(default)]
    pub data: Option<PathBuf>,
    #[serde(deserialize_with = "crate::field::from_text")]
    pub split: Split,
    /// Embed the adversarial images of this attack on the first `options.queries` test items
    /// instead of the clean ones (items the attack leaves unmoved keep their clean image).
    #[serde(default)]
    pub attack: Option<String>,
    /// The attack's budget, method, queries and seed (with `attack`).
    #[serde(default)]
    pub options: ScoringOptions,
    /// A file to write them to: NAME.safetensors, NAME.npz, or a NAME.npy set.
    #[serde(default)]
    pub out: Option<PathBuf>,
    #[serde(default)]
    pub overwrite: bool,
    #[serde(default = "crate::field::yes")]
    pub progress: bool,
}

/// What was embedded: the arrays, a few words on which items, and the weights' digest.
pub struct Embedded {
    pub exported: Exported,
    pub what: String,
    pub model_digest: String,
}

impl EmbedJob {
    /// Checks the request (and `out`, before any work), opens the device with `device`, embeds,
    /// and writes `out`.
    pub fn run(&self, device: impl FnOnce() -> Result<Device>) -> Result<Embedded> {
        crate::ensure_input!(
            self.attack.is_none() || self.split == Split::Test,
            "⟨attack⟩ attacks test items: use it with ⟨split⟩ test"
        );
        let attack = match &self.attack {
            Some(spec) => {
                let (unit, spec_budget) = crate::attack::registry::attack_with_budget(spec)
                    .map_err(|e| crate::input_error(format!("⟨attack⟩: {e:#}")))?;
                Some((unit, self.options.resolve(spec_budget, 1)?))
            }
            None => None,
        };
        if let Some(o) = &self.out {
            crate::embed::check_out(o, self.overwrite)?;
        }
        // The run folder before the device: a wrong folder is said at once.
        crate::run_dir::check_finished(&self.model)?;
        let device = device()?;
        let (exported, what, model_digest) = match &attack {
            Some((unit, options)) => {
                let run = crate::scoring::options::RunScoring {
                    data: self.data.clone(),
                    progress: self.progress,
                    ..Default::default()
                };
                let session = crate::scoring::open_run(&self.model, &run, options, &device)?;
                let mut sink = crate::embed::AttackedEmbeddings::new(session.target.model.as_ref());
                let r = session.attack_once(unit.as_ref(), false, Some(&mut sink))?;
                let what = format!("{} test items attacked by {}", r.queries, r.attack);
                (sink.out, what, session.scoree.digest.unwrap_or_default())
            }
            None => {
                let target = crate::target::Target::open(&self.model, self.data.as_deref(), 0, &device)?;
                let (exported, what) = crate::embed::embed_split(&target.run, self.split, &device)?;
                (exported, what, target.digest)
            }
        };
        if let Some(o) = &self.out {
            let meta = [
                ("model", self.model.display().to_string()),
                ("model_digest", model_digest.clone()),
                ("split", what.clone()),
                ("rdml", env!("CARGO_PKG_VERSION").to_string()),
            ];
            crate::embed::check_out(o, self.overwrite)?;
            crate::embed::write(o, &exported, &meta)?;
        }
        Ok(Embedded {
            exported,
            what,
            model_digest,
        })
    }
}
