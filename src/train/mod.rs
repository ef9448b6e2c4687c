//! The training loop: sampled batches → model → loss → Adam, per-epoch evaluation, checkpoints
//! after every epoch (resumable), a JSON-lines log and `run.json`.

use crate::config::Experiment;
use crate::data::loader;
use crate::data::sampler::{self, epoch_rng};
use crate::eval::batch_tensor;
use crate::run_dir::{self, RunDir, RunLog, Start, config_diff};
use anyhow::{Context, Result, bail, ensure};

pub mod defended;
mod epoch;
mod load;
mod record;
mod trainer;

use burn::module::Module;
use burn::tensor::Device;
pub use load::{LoadedRun, load_model, load_run};
use record::CheckpointState;
pub use record::{EpochRecord, RunReport, TrainOptions};
use serde::Serialize;
use std::time::Instant;
pub use trainer::Trainer;

/// Trains the experiment; writes `model.safetensors`, `run.json`, `log.jsonl` and a resumable
/// checkpoint into `opts.out`. The config, the data and the output folder are checked before
/// anything is written; a finished or interrupted run in `opts.out` is continued only with
/// `opts.resume` and replaced only with `opts.overwrite` (see [`RunDir`]).
pub fn train(exp: &Experiment, opts: &TrainOptions, device: &Device) -> Result<RunReport> {
    ensure!(
        !(opts.resume && opts.overwrite),
        "⟨resume!⟩ and ⟨overwrite!⟩ exclude each other: continue the run, or replace it"
    );
    let device = device.clone().autodiff();
    let splits = exp.data.load(exp.seed)?;
    let gallery = crate::data::check::for_training(&splits, &exp.train.sampler)?;
    crate::eval::check_recall_ks(&exp.eval.recall_ks, gallery)?;
    // The sampler's own errors (too few classes for a class-balanced batch) come now, too.
    sampler::epoch_batches(&exp.train.sampler, &splits.train.labels, exp.seed, 0)?;
    let shape = splits.train.item_shape();
    let trainer = Trainer::new(exp, shape, &device)?;
    let config_toml = exp.to_toml()?;
    let start = match (opts.resume, opts.overwrite) {
        (true, _) => Start::Resume,
        (_, true) => Start::Overwrite,
        _ => Start::New,
    };
    let run = RunDir::open(&opts.out, start)?;
    // A replaced run stays aside until the new one has a complete checkpoint: put it back when
    // this one fails first (a kill is undone by the next `train` into the folder).
    let trained = train_in(exp, opts, &run, trainer, &splits, &config_toml, &device);
    if trained.is_err()
        && let Err(e) = run.abandon_replacement()
    {
        crate::notes::warn(format!(
            "{}: the replaced run could not be put back: {e:#}",
            opts.out.display()
        ));
    }
    trained
}

/// The epochs of [`train`], in the claimed run folder: resume (when asked), each epoch with its
/// checkpoint and partial `run.json`, then the model and the final `run.json`.
fn train_in(
    exp: &Experiment,
    opts: &TrainOptions,
    run: &RunDir,
    trainer: Trainer,
    splits: &crate::data::Splits,
    config_toml: &str,
    device: &Device,
) -> Result<RunReport> {
    let (mut trainer, mut done) = if opts.resume {
        resume(exp, opts, run, trainer, config_toml)?
    } else {
        (trainer, Done::default())
    };
    let mut log = RunLog::open(&run.file(run_dir::LOG), done.history.len())?;
    for epoch in done.history.len()..exp.train.epochs {
        let (t, rec) = epoch::run(exp, opts, trainer, splits, epoch, &mut log, device)?;
        trainer = t;
        done.train_seconds += rec.seconds;
        done.history.push(rec);
        let state = CheckpointState {
            epochs_done: epoch + 1,
            history: done.history.clone(),
            train_seconds: done.train_seconds,
            config_toml: config_toml.to_string(),
            defense_state: trainer.defense_state.clone(),
        };
        trainer.save_checkpoint(run, &state)?;
        run_dir::put_json(run.path(), run_dir::RUN, &done.report(exp, false))?;
    }
    // The saved model is the evaluation-mode snapshot (running statistics of the last step).
    run_dir::put(run.path(), run_dir::MODEL, &trainer.net.valid().to_bytes()?)?;
    run_dir::put(run.path(), run_dir::CONFIG, config_toml.as_bytes())?;
    let report = done.report(exp, true);
    run_dir::put_json(run.path(), run_dir::RUN, &report)?;
    Ok(report)
}

/// Writes `run`'s model, config, a finished `run.json` of no epoch and a checkpoint of no epoch
/// around `net` (a model made elsewhere: `rdml import`), so that every command reads the run and
/// `train --resume` fine-tunes it for the config's `train.epochs` with a fresh optimiser.
pub fn seed_run(
    exp: &Experiment,
    net: crate::model::EmbeddingNet,
    in_shape: [usize; 3],
    run: &RunDir,
) -> Result<RunReport> {
    let config_toml = exp.to_toml()?;
    let mut trainer = Trainer::new(exp, in_shape, &crate::default_device())?;
    trainer.net = net;
    let state = CheckpointState {
        epochs_done: 0,
        history: Vec::new(),
        train_seconds: 0.0,
        config_toml: config_toml.clone(),
        defense_state: Default::default(),
    };
    run_dir::put(run.path(), run_dir::MODEL, &trainer.net.to_bytes()?)?;
    run_dir::put(run.path(), run_dir::CONFIG, config_toml.as_bytes())?;
    let report = Done::default().report(exp, true);
    run_dir::put_json(run.path(), run_dir::RUN, &report)?;
    // Last: a run this one replaces stands until the new checkpoint does.
    trainer.save_checkpoint(run, &state)?;
    Ok(report)
}

/// The epochs a run has finished, and their training time.
#[derive(Default)]
struct Done {
    history: Vec<EpochRecord>,
    train_seconds: f64,
}

impl Done {
    /// `run.json`: partial after each epoch, complete (with the final metrics' verdict) at the end.
    fn report(&self, exp: &Experiment, completed: bool) -> RunReport {
        let final_metrics = completed
            .then(|| self.history.last().and_then(|r| r.metrics.clone()))
            .flatten();
        let verdict = final_metrics.as_ref().and_then(|m| m.health).map(|h| h.verdict);
        RunReport {
            config: exp.clone(),
            epochs: self.history.clone(),
            train_seconds: self.train_seconds,
            final_metrics,
            completed,
            rdml_version: env!("CARGO_PKG_VERSION").into(),
            verdict,
        }
    }
}

/// The newest complete checkpoint of `run`, refused when it was made with another config (only
/// `train.epochs` may grow).
fn resume(
    exp: &Experiment,
    opts: &TrainOptions,
    run: &RunDir,
    trainer: Trainer,
    config_toml: &str,
) -> Result<(Trainer, Done)> {
    let ckpt = run.checkpoint().ok_or_else(|| {
        crate::input_error(format!(
            "{}: no complete checkpoint to resume ({})",
            opts.out.display(),
            crate::run_dir::checkpoint_problem(&opts.out)
        ))
    })?;
    let (mut trainer, state) = trainer.load_checkpoint(&ckpt)?;
    // Compared as this version writes both: a checkpoint of an earlier rdml keeps its layout.
    let stored = Experiment::rewritten(&state.config_toml).unwrap_or_else(|| state.config_toml.clone());
    let keys: Vec<String> = config_diff(&stored, config_toml)
        .into_iter()
        .filter(|k| k != "train.epochs")
        .collect();
    if !keys.is_empty() {
        bail!(
            "{}: the checkpoint was made with a different configuration (differs at {}); resume with the same config and overrides (see {}/run.json)",
            opts.out.display(),
            keys.join(", "),
            opts.out.display()
        );
    }
    ensure!(
        state.epochs_done <= exp.train.epochs,
        "{}: the checkpoint has {} epochs done, more than train.epochs = {}",
        opts.out.display(),
        state.epochs_done,
        exp.train.epochs
    );
    trainer.restore_defense_state(&state.defense_state)?;
    let done = Done {
        history: state.history,
        train_seconds: state.train_seconds,
    };
    ensure!(
        done.history.len() == state.epochs_done,
        "{}: the checkpoint's state.json lists {} epoch records for {} epochs done",
        ckpt.display(),
        done.history.len(),
        state.epochs_done
    );
    Ok((trainer, done))
}

/// What [`time_steps`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct StepTiming {
    pub steps: usize,
    /// Mean wall time of one training step (forward, defense, loss, backward, Adam), seconds.
    pub seconds_per_step: f64,
    pub batch: usize,
    pub item_shape: [usize; 3],
}

/// Times training steps of `exp` on `device`: one warm-up step, then the mean of `steps` steps,
/// each ending with the loss read back (so the device has finished it). The batch is the
/// sampler's first batch of the training split, or, with `random_shape`, random images of that
/// shape in the sampler's class layout (data need not be present).
pub fn time_steps(
    exp: &Experiment,
    steps: usize,
    random_shape: Option<[usize; 3]>,
    device: &Device,
) -> Result<StepTiming> {
    ensure!(steps >= 1, "⟨steps⟩ must be ≥ 1");
    let device = device.clone().autodiff();
    let mut bank_set = None;
    let (images, labels, items, shape) = match random_shape {
        Some(shape) => {
            let per = exp.train.sampler.per_class();
            let n = exp.train.sampler.batch_size();
            let labels: Vec<u32> = (0..n).map(|i| (i / per) as u32).collect();
            let [c, h, w] = shape;
            // Checked before the allocation, as a config's batch is: a clear error, not an abort.
            let bytes = [n, c, h, w].iter().try_fold(4u64, |a, &d| a.checked_mul(d as u64));
            ensure!(
                bytes.is_some_and(|b| b <= crate::config::MAX_BATCH_INPUT),
                "⟨random_images⟩ {c},{h},{w}: a batch of {n} such images is {} of input alone, beyond rdml's limit \
                 of {} GiB: lower the image size or train.sampler.pairs",
                bytes.map_or("more bytes than memory can address".to_string(), |b| format!(
                    "{} GiB",
                    b >> 30
                )),
                crate::config::MAX_BATCH_INPUT >> 30
            );
            let x: burn::tensor::Tensor<4> =
                crate::host_random(exp.seed, [n, c, h, w], burn::tensor::Distribution::Default, &device);
            let items = (0..n).collect();
            (x.without_autodiff(), labels, items, shape)
        }
        None => {
            let splits = exp.data.load(exp.seed)?;
            let batches = sampler::epoch_batches(&exp.train.sampler, &splits.train.labels, exp.seed, 0)?;
            let first = batches.first().context("the training split gives no batch")?;
            let b = loader::load_batch(&splits.train, first, None)?;
            let shape = splits.train.item_shape();
            bank_set = Some(splits.train);
            (batch_tensor(&b, &device), b.labels, b.positions, shape)
        }
    };
    let mut trainer = Trainer::new(exp, shape, &device)?;
    if let Some(set) = &bank_set {
        trainer.start_epoch(exp, set, &device)?;
    }
    let mut rng = epoch_rng(exp.seed, 0, 2);
    let mut total = 0.0;
    for s in 0..=steps {
        let t = Instant::now();
        let (tr, _, _) = trainer.step(exp, images.clone(), &labels, &items, &mut rng)?;
        trainer = tr;
        if s > 0 {
            total += t.elapsed().as_secs_f64();
        }
    }
    Ok(StepTiming {
        steps,
        seconds_per_step: total / steps as f64,
        batch: labels.len(),
        item_shape: shape,
    })
}
