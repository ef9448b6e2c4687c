//! The wire's jobs on a model held outside rdml (or a run folder) and the caller's images:
//! `score` (`rdml.robustness`, `rdml.attack`, `rdml.Attack`) and `embed_model` (`rdml.embed`).

use super::{Answer, Call};
use crate::attack::oracle::HostModel;
use crate::scoring::model::{Images, Model, ModelScoring};
use crate::scoring::options::ScoringOptions;
use anyhow::Result;
use burn::tensor::Device;
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;

/// Images as the request describes them (their values are an array of the call).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Shaped {
    shape: [usize; 4],
    #[serde(default)]
    labels: Vec<i64>,
}

impl Shaped {
    pub(super) fn with(self, images: Option<Vec<f32>>) -> Images {
        Images {
            images: images.unwrap_or_default(),
            shape: self.shape,
            labels: self.labels,
        }
    }
}

/// `score`: `rdml.robustness` (no `spec`) or `rdml.attack` on a model and the caller's images
/// (the arrays: the images, then the gallery's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Score {
    #[serde(default)]
    spec: Option<String>,
    #[serde(default)]
    options: ScoringOptions,
    #[serde(default = "repeats")]
    repeats: usize,
    #[serde(default)]
    out: Option<PathBuf>,
    #[serde(default = "crate::field::yes")]
    progress: bool,
    /// The model or surrogate as an rdml run folder, where it is not one of the call's models.
    #[serde(default)]
    model_run: Option<PathBuf>,
    #[serde(default)]
    surrogate_run: Option<PathBuf>,
    /// The digest the caller took of its model's parameters and buffers.
    #[serde(default)]
    model_digest: Option<String>,
    images: Shaped,
    #[serde(default)]
    gallery: Option<Shaped>,
    /// Return the attack's adversarial images (`rdml.Attack`); with `every_item`, every item
    /// the attack moves is attacked.
    #[serde(default)]
    adversarial: bool,
    #[serde(default)]
    every_item: bool,
}

/// `certify_model`: `rdml.certify` on a model and the caller's images (the arrays: the images,
/// then the gallery's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CertifyModel {
    #[serde(default)]
    options: crate::certify::options::CertifyOptions,
    #[serde(default = "crate::field::yes")]
    progress: bool,
    #[serde(default)]
    model_run: Option<PathBuf>,
    #[serde(default)]
    model_digest: Option<String>,
    images: Shaped,
    #[serde(default)]
    gallery: Option<Shaped>,
}

pub(super) fn certify(r: CertifyModel, c: Call, open: impl FnOnce() -> Result<Device>) -> Result<Answer> {
    let m = model(r.model_run, c.model, "model")?.ok_or_else(|| crate::input_error("model: missing"))?;
    let mut arrays = c.arrays.into_iter();
    let images = r.images.with(arrays.next());
    let gallery = r.gallery.map(|g| g.with(arrays.next()));
    let dev = open()?;
    let record = crate::scoring::model::certify(
        m,
        images,
        gallery,
        &r.options,
        (r.model_digest, r.progress),
        &dev,
        &c.ranks,
    )?;
    Answer::of(&record)
}

fn repeats() -> usize {
    crate::scoring::defaults::REPEATS
}

/// The model a scoring call names: a run folder, or the caller's own.
fn model(run: Option<PathBuf>, held: Option<Box<dyn HostModel>>, what: &str) -> Result<Option<Model>> {
    Ok(match (run, held) {
        (Some(dir), None) => Some(Model::Run(dir)),
        (None, Some(m)) => Some(Model::Outside(m)),
        (None, None) => None,
        (Some(_), Some(_)) => return Err(crate::input_error(format!("{what}: both a run folder and a model"))),
    })
}

pub(super) fn score(r: Score, c: Call, open: impl FnOnce() -> Result<Device>) -> Result<Answer> {
    let m = model(r.model_run, c.model, "model")?.ok_or_else(|| crate::input_error("model: missing"))?;
    let sur = model(r.surrogate_run, c.surrogate, "surrogate")?;
    let mut arrays = c.arrays.into_iter();
    let images = r.images.with(arrays.next());
    let req = ModelScoring {
        options: r.options,
        repeats: r.repeats,
        gallery: r.gallery.map(|g| g.with(arrays.next())),
        out: r.out,
        progress: r.progress,
        model_digest: r.model_digest,
        ranks: c.ranks.clone(),
    };
    let dev = open()?;
    if r.adversarial {
        let spec = r.spec.as_deref().ok_or_else(|| crate::input_error("spec: missing"))?;
        let (result, adv) = req.attack_images(spec, (m, sur), images, r.every_item, &dev)?;
        /// The result as `Run.attack` gives it, with the items the images replace.
        #[derive(serde::Serialize)]
        struct WithImages<'a> {
            #[serde(flatten)]
            result: &'a crate::attack::result::AttackResult,
            attacked: &'a [usize],
            of_gallery: bool,
        }
        let with = WithImages {
            result: &result,
            attacked: &adv.attacked,
            of_gallery: adv.of_gallery,
        };
        return Ok(Answer {
            arrays: vec![adv.values],
            ..Answer::of(&with)?
        });
    }
    match &r.spec {
        None => {
            let scored = req.robustness(m, sur, images, &dev)?;
            if let Some(dir) = &scored.out {
                crate::html::write_scored(dir, &scored.record, scored.images)?;
            }
            Answer::of(&scored.record)
        }
        Some(spec) => Answer::of(&crate::scoring::model::attack_json(
            &req.attack(spec, m, sur, images, &dev)?,
        )?),
    }
}

/// `embed_model`: `rdml.embed` on a model and the caller's images (the one array).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EmbedModel {
    #[serde(default)]
    model_run: Option<PathBuf>,
    shape: [usize; 4],
    #[serde(default = "batch")]
    batch: usize,
}

fn batch() -> usize {
    crate::scoring::defaults::BATCH
}

pub(super) fn embed_model(r: EmbedModel, c: Call, open: impl FnOnce() -> Result<Device>) -> Result<Answer> {
    let m = model(r.model_run, c.model, "model")?.ok_or_else(|| crate::input_error("model: missing"))?;
    let images = c.arrays.into_iter().next().unwrap_or_default();
    let e = crate::scoring::model::embed(m, &images, (r.shape, r.batch), &open()?, &c.ranks)?;
    Ok(Answer {
        arrays: vec![e.data],
        ..Answer::of(&json!({"dim": e.dim}))?
    })
}
