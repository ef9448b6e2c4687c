//! The wire's stateless jobs for a caller's own training loop: a preset's tables
//! (`rdml.Defense.preset`) and rdml's own trainer on one batch (`trainer_step`, what the Python
//! package's equivalence tests hold `rdml.Defense` and `rdml.Loss` against).

use super::Answer;
use super::model::Shaped;
use anyhow::Result;
use burn::tensor::Device;
use serde::Deserialize;
use serde_json::json;

/// `trainer_step`: rdml's own trainer on one batch ([`crate::harden::reference`]); the
/// one array holds the images.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TrainerStep {
    #[serde(flatten)]
    step: crate::harden::reference::ReferenceRequest,
    images: Shaped,
}

pub(super) fn trainer_step(
    r: TrainerStep,
    arrays: Vec<Vec<f32>>,
    open: impl FnOnce() -> Result<Device>,
) -> Result<Answer> {
    let images = r.images.with(arrays.into_iter().next());
    let mut out = crate::harden::reference::run(r.step, images, &open()?)?;
    Ok(Answer {
        arrays: std::mem::take(&mut out.grads),
        ..Answer::of(&out)?
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Preset {
    pub(super) name: String,
}

/// A preset's `[defense]` and `[loss]` tables (and whether its model normalises its embeddings),
/// as a loop that trains its own model takes them.
pub(super) fn preset_tables(name: &str) -> Result<Answer> {
    crate::ensure_input!(
        crate::config::PRESETS.iter().any(|(n, _)| *n == name),
        "{name:?}: no such preset"
    );
    let exp = crate::config::Experiment::load(name, &[])?;
    Answer::of(&json!({
        "defense": exp.defense,
        "loss": exp.loss,
        "l2_normalize": exp.model.l2_normalize,
    }))
}
