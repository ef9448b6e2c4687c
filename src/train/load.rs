//! Opening a finished run folder: its config, its weights (checked), and its test split.

use crate::config::Experiment;
use crate::model::EmbeddingNet;
use crate::run_dir;
use anyhow::{Context, Result, ensure};
use burn::tensor::Device;
use std::path::Path;

/// A finished run, loaded for evaluation or attack.
pub struct LoadedRun {
    pub exp: Experiment,
    pub net: EmbeddingNet,
    /// The test split (of `data` when given, else of the run's config).
    pub test: crate::data::EvalSet,
}

/// Loads a trained model from a finished run folder (`config.toml` + `model.safetensors`) and
/// its test split, from `data` instead of the config's folder when given. Refuses an unfinished
/// run, a damaged weights file and non-finite weights. Only the test split is read.
pub fn load_run(dir: &Path, data: Option<&Path>, device: &Device) -> Result<LoadedRun> {
    let mut exp = finished_config(dir)?;
    if let Some(d) = data {
        exp.data.use_folder(d);
    }
    let test = exp
        .data
        .load_test(exp.seed)
        .with_context(|| format!("{}: cannot load the run's test split", dir.display()))?;
    let net = load_net(dir, &exp, test.query.item_shape(), device)?;
    Ok(LoadedRun { exp, net, test })
}

/// Loads only the model of a finished run, for images of `item_shape` (a transfer attack's
/// surrogate, made on another run's test images); its own data need not be present.
pub fn load_model(dir: &Path, item_shape: [usize; 3], device: &Device) -> Result<(Experiment, EmbeddingNet)> {
    let exp = finished_config(dir)?;
    let net = load_net(dir, &exp, item_shape, device).map_err(|e| {
        // burn's own words for weights of another input shape, said as what the user did.
        if !format!("{e:#}").contains("ShapeMismatch") {
            return e;
        }
        let [c, h, w] = item_shape;
        let dataset = serde_json::to_value(exp.data.dataset)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        crate::input_error(format!(
            "its model takes images of another shape than these {c}×{h}×{w} ones (C×H×W; it was trained on \
             data.dataset = \"{dataset}\"): use a model trained on images like these"
        ))
    })?;
    Ok((exp, net))
}

/// The config of a finished run folder.
fn finished_config(dir: &Path) -> Result<Experiment> {
    run_dir::check_finished(dir)?;
    let cfg = dir.join(run_dir::CONFIG);
    ensure!(
        crate::read::is_file(&cfg, crate::read::Follow::Links)?,
        "{}: the finished run has no config.toml (removed since?)",
        dir.display()
    );
    Experiment::load_file(&cfg, &[])
}

fn load_net(dir: &Path, exp: &Experiment, item_shape: [usize; 3], device: &Device) -> Result<EmbeddingNet> {
    let mut model_cfg = exp.model.clone();
    model_cfg.pretrained = None;
    EmbeddingNet::new(&model_cfg, item_shape, device)?.load(&dir.join(run_dir::MODEL))
}
