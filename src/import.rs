//! A model trained in PyTorch made into an rdml run folder (`rdml import`, Python's
//! `rdml.import_torch`): every command reads it as it reads a run it trained (`eval`, `attack`,
//! `robustness`, `embed`, `report`), and `train --resume` fine-tunes it.
//!
//! The folder is a run folder like any other ([`RunDir`]): a run it replaces (`--overwrite`) is
//! moved aside, journaled, until the imported run's checkpoint (written last) stands, so a kill at
//! any point leaves the old run or the new one once the next command settles the folder; files
//! of the user's in the folder are never touched.

use crate::config::Experiment;
use crate::model::checkpoint::{self, Checkpoint};
use crate::model::import::{Allow, ImportRecord};
use crate::model::layout::KeyRule;
use crate::model::{Arch, ModelConfig};
use crate::run_dir::{self, RunDir, Start};
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};

/// What to import, and how the model is to be read (read from JSON by the Python package, by
/// these names).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// The checkpoint: `.pth`/`.pt` (`torch.save`), a Lightning `.ckpt`, or `.safetensors`.
    pub from: PathBuf,
    /// pytorch-metric-learning's embedder file, when `from` is its trunk.
    #[serde(default)]
    pub embedder: Option<PathBuf>,
    #[serde(deserialize_with = "crate::field::from_text")]
    pub arch: Arch,
    /// Checked against the checkpoint's embedding layer; read from it when `None`.
    #[serde(default)]
    pub embedding_dim: Option<usize>,
    /// Key-prefix rules: `OLD=NEW` texts, or OLD → NEW (a dict in Python).
    #[serde(default)]
    pub key_map: KeyMap,
    #[serde(default)]
    pub allow: Allow,
    /// L2-normalise the embedding (robrank's `N`/`C` losses, PML's cosine setups); default on.
    /// Off, the run's `loss.distance` becomes `euclidean` unless `set` names one.
    #[serde(default)]
    pub l2_normalize: Option<bool>,
    /// `imagenet`, `none`, or `M1,M2,M3/S1,S2,S3`; default ImageNet's for ResNets (torchvision,
    /// timm, robrank), none for C2F2 (robrank feeds it raw pixels).
    #[serde(default)]
    pub input_norm: Option<String>,
    /// The experiment config whose data, loss and evaluation settings the run takes (its model
    /// table is replaced); default `quickstart` for C2F2, `cub-resnet18-triplet` for ResNets.
    #[serde(default)]
    pub config: Option<String>,
    #[serde(default)]
    pub set: crate::config::SetKeys,
    pub out: PathBuf,
    /// Replace an rdml run already in `out`.
    #[serde(default)]
    pub overwrite: bool,
}

/// Key-prefix rules as a request carries them: `OLD=NEW` texts (`--key-map`, a list in Python),
/// or OLD → NEW (a dict in Python).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum KeyMap {
    Texts(Vec<String>),
    Prefixes(serde_json::Map<String, serde_json::Value>),
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap::Texts(vec![])
    }
}

impl KeyMap {
    /// The rules, each checked.
    pub fn rules(&self) -> Result<Vec<KeyRule>> {
        match self {
            KeyMap::Texts(t) => t.iter().map(|r| r.parse()).collect(),
            KeyMap::Prefixes(m) => m
                .iter()
                .map(|(from, to)| match to.as_str() {
                    Some(to) => KeyRule::new(from, to),
                    None => Err(crate::input_error(format!(
                        "⟨key_map⟩ {from:?}: {to} is not a key prefix (expected a string; \"\" strips {from:?})"
                    ))),
                })
                .collect(),
        }
    }
}

/// The `[model]` normalisation fields `spec` names (`--input-norm`).
fn input_norm(spec: &str, cfg: &mut ModelConfig) -> Result<()> {
    match spec.trim() {
        "imagenet" => cfg.imagenet_norm = Some(true),
        "none" => cfg.imagenet_norm = Some(false),
        s => {
            let err = || {
                anyhow::anyhow!(
                    "⟨input_norm⟩ {s:?}: expected imagenet, none, or MEAN/STD as comma-separated per-channel values (e.g. 0.5,0.5,0.5/0.5,0.5,0.5)"
                )
            };
            let (m, sd) = s.split_once('/').ok_or_else(err)?;
            let parse = |v: &str| -> Result<Vec<f32>> {
                v.split(',')
                    .map(|x| x.trim().parse::<f32>().map_err(|_| err()))
                    .collect()
            };
            cfg.imagenet_norm = None;
            cfg.input_mean = Some(parse(m)?);
            cfg.input_std = Some(parse(sd)?);
        }
    }
    Ok(())
}

/// The run's experiment: `req.config` with its model table replaced by the imported model's.
fn experiment(req: &ImportRequest, embedding_dim: usize) -> Result<Experiment> {
    let default = match req.arch {
        Arch::C2f2 => "quickstart",
        _ => "cub-resnet18-triplet",
    };
    let config = req.config.as_deref().unwrap_or(default);
    let set = req.set.texts()?;
    let mut exp = Experiment::load(config, &set)?;
    let l2_normalize = req.l2_normalize.unwrap_or(true);
    // Raw embeddings are compared in Euclidean distance unless the user says otherwise.
    let distance_set = set.iter().any(|s| s.trim_start().starts_with("loss.distance"));
    if !l2_normalize && exp.loss.distance().needs_normalized() && !distance_set {
        let mut set = set.clone();
        set.push("loss.distance=\"euclidean\"".into());
        exp = Experiment::load(config, &set)?;
    }
    let mut model = ModelConfig {
        arch: req.arch,
        embedding_dim,
        l2_normalize,
        imagenet_norm: None,
        input_mean: None,
        input_std: None,
        pretrained: None,
        frozen_bn: exp.model.frozen_bn && req.arch != Arch::C2f2,
        bn_sets: 1,
    };
    if let Some(spec) = &req.input_norm {
        input_norm(spec, &mut model)?;
    }
    model.validate().context("the imported model")?;
    exp.model = model;
    exp.validate().context("the imported run's configuration")?;
    Ok(exp)
}

/// How the run folder `out` is claimed: new, empty or a run killed before its checkpoint
/// ([`Start::New`]), or (with `overwrite`) a run replaced ([`Start::Overwrite`]), as
/// [`run_dir::inspect`] tells them apart for `train`.
fn check_out(out: &Path, overwrite: bool) -> Result<Start> {
    ensure!(
        !run_dir::is_link(out),
        "{} is a symbolic link; rdml does not write through links",
        out.display()
    );
    ensure!(out.file_name().is_some(), "⟨out⟩ {}: name a folder", out.display());
    run_dir::refuse_own_folder(out, out)?;
    run_dir::settle_interrupted(out)?;
    match run_dir::inspect(out)? {
        run_dir::Found::Nothing | run_dir::Found::Started => Ok(Start::New),
        run_dir::Found::Foreign => bail!(
            "{} is not empty and is not an rdml run folder: choose another ⟨out⟩",
            out.display()
        ),
        _ => {
            ensure!(
                overwrite,
                "{} holds an rdml run: pass ⟨overwrite!⟩ to replace it, or choose another ⟨out⟩",
                out.display()
            );
            Ok(Start::Overwrite)
        }
    }
}

/// Imports `req.from` into the run folder `req.out`; returns what was read and where it went.
pub fn import(req: &ImportRequest) -> Result<ImportRecord> {
    for f in std::iter::once(&req.from).chain(&req.embedder) {
        if std::fs::metadata(f).is_err() {
            return Err(crate::not_found(format!("{}: no such checkpoint file", f.display())));
        }
        // A folder, a FIFO or a device is said as what it is.
        crate::read::open(f, crate::read::Follow::Links, crate::read::ANY)?;
    }
    let start = check_out(&req.out, req.overwrite)?;
    let rules = req.key_map.rules()?;
    let mut sources: Vec<Checkpoint> = vec![checkpoint::read(&req.from)?];
    if let Some(e) = &req.embedder {
        sources.push(checkpoint::read(e)?);
    }
    crate::model::import::refuse_unreadable(req.arch, &sources, &rules)?;
    let (file_dim, in_shape) = crate::model::import::inferred_shape(req.arch, &sources, &rules)?;
    let dim = match (req.embedding_dim, file_dim) {
        (Some(asked), Some(found)) if asked != found => bail!(
            "{}: the checkpoint's embedding layer has {found} outputs, not ⟨embedding_dim⟩ {asked}",
            req.from.display()
        ),
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => bail!(
            "{}: no embedding layer found to read the embedding width from: pass ⟨embedding_dim⟩",
            req.from.display()
        ),
    };
    let exp = experiment(req, dim)?;
    let device = crate::default_device();
    let (net, mut record) = crate::model::import::import(&exp.model, in_shape, &sources, &rules, &req.allow, &device)?;
    record.embedding_dim = dim;
    record.config = req.config.clone();
    record.default_config = req.config.is_none();
    let run = RunDir::open(&req.out, start)?;
    let written = write_run(&run, &exp, net, in_shape, &record);
    if written.is_err() {
        let _ = run.abandon_replacement();
    }
    written?;
    Ok(record)
}

/// The imported run's files, its checkpoint last: until it stands, a replaced run comes back.
fn write_run(
    run: &RunDir,
    exp: &Experiment,
    net: crate::model::EmbeddingNet,
    in_shape: [usize; 3],
    record: &ImportRecord,
) -> Result<()> {
    run_dir::put_json(run.path(), run_dir::IMPORT, record)?;
    crate::train::seed_run(exp, net, in_shape, run)?;
    Ok(())
}
