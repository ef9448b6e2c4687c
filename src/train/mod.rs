//! The training loop: sampled batches → model → loss → Adam, per-epoch evaluation, checkpoints
//! after every epoch (resumable), a JSON-lines log and `run.json`.

use crate::atomic::{write_atomic, write_json};
use crate::config::Experiment;
use crate::data::loader;
use crate::data::sampler::{self, epoch_rng};
use crate::defense::diagnostics::{self, DeviceDiagnostics, EpochDiagnostics};
use crate::defense::{self as defense_mod, DefenseState};
use crate::eval::health::Verdict;
use crate::eval::{Metrics, batch_tensor};
use crate::kernel::adam::FusedAdam;
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use crate::run_dir::{self, RunDir, RunLog, Start, config_diff};
use anyhow::{Context, Result, bail, ensure};

mod epoch;
mod load;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::Device;
pub use load::{LoadedRun, load_model, load_run};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One epoch's record in `run.json` and the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: usize,
    pub batches: usize,
    /// NaN or infinite when training diverged: JSON writes it as `null`, read back as NaN.
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_loss: f64,
    pub seconds: f64,
    pub metrics: Option<Metrics>,
    /// Collapse diagnostics averaged over the epoch's batches.
    #[serde(default)]
    pub diagnostics: Option<EpochDiagnostics>,
}

fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `run.json`: the resolved config, the per-epoch history and the wall time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub config: Experiment,
    pub epochs: Vec<EpochRecord>,
    pub train_seconds: f64,
    pub final_metrics: Option<Metrics>,
    pub completed: bool,
    pub rdml_version: String,
    /// The health verdict of the final evaluation (see `eval::health`).
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// What the caller wants besides the config.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    pub out: PathBuf,
    pub resume: bool,
    /// Replace the run already in `out` (rdml's own files only).
    pub overwrite: bool,
    /// Print progress (a bar on a terminal, plain lines otherwise).
    pub progress: bool,
}

fn adam(cfg: &crate::config::OptimizerConfig) -> ModuleOptimizer {
    let decay = (cfg.weight_decay > 0.0).then_some(cfg.weight_decay as f32);
    ModuleOptimizer::from(FusedAdam::new(cfg.beta1, cfg.beta2, cfg.epsilon, decay))
}

/// The pieces a training step updates.
pub struct Trainer {
    pub net: EmbeddingNet,
    pub loss_params: LossParams,
    pub defense_state: DefenseState,
    /// MDProp's UX target features (Eq. 8), rebuilt at every epoch start by [`Trainer::refresh_ux_bank`].
    pub ux_bank: Option<crate::defense::UxBank>,
    /// The last step's adversarial loss, on the device until [`Trainer::settle_defense_state`]
    /// reads it into `defense_state.prev_loss` (HM's steps, the epoch's checkpoint).
    pending_adv_loss: Option<burn::tensor::Tensor<1>>,
    optim: ModuleOptimizer,
    optim_loss: ModuleOptimizer,
}

impl Trainer {
    pub fn new(exp: &Experiment, in_shape: [usize; 3], device: &Device) -> Result<Self> {
        let net = crate::seeded(device, exp.seed, || EmbeddingNet::new(&exp.model, in_shape, device))?;
        let loss_params = LossParams::new(&exp.loss, device);
        Ok(Self {
            net,
            loss_params,
            defense_state: DefenseState::default(),
            ux_bank: None,
            pending_adv_loss: None,
            optim: adam(&exp.train.optimizer),
            optim_loss: adam(&exp.train.optimizer),
        })
    }

    /// Reads the last step's adversarial loss into `defense_state.prev_loss` (LGA's ℓ̄_{t−1}).
    pub fn settle_defense_state(&mut self) -> Result<()> {
        if let Some(l) = self.pending_adv_loss.take() {
            self.defense_state.prev_loss = crate::host::scalar(&l)?;
        }
        Ok(())
    }

    /// Embeds the training set for MDProp's UX targets when the defense generates UX (a no-op
    /// otherwise).
    pub fn refresh_ux_bank(&mut self, exp: &Experiment, train: &crate::data::ImageSet, device: &Device) -> Result<()> {
        let ux = exp.defense.as_ref().is_some_and(|d| {
            d.distributions()
                .iter()
                .any(|g| matches!(g, crate::defense::Generated::Ux { .. }))
        });
        if ux {
            let bank = crate::defense::UxBank::build(&self.net, train, exp.eval.batch_size, device)?;
            self.ux_bank = Some(bank);
        }
        Ok(())
    }

    /// One optimisation step on a batch (`items`: the training-set positions of its images);
    /// returns the updated trainer, the loss value and the batch's collapse diagnostics.
    pub fn step(
        mut self,
        exp: &Experiment,
        images: burn::tensor::Tensor<4>,
        labels: &[u32],
        items: &[usize],
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Result<(Self, f64, DeviceDiagnostics)> {
        let (loss_t, diag) = match &exp.defense {
            Some(d) => {
                // Only HM's linear gradual adversary reads the last step's adversarial loss.
                if d.unit().reads_previous_loss() {
                    self.settle_defense_state()?;
                }
                let ux = self
                    .ux_bank
                    .as_ref()
                    .map(|bank| crate::defense::UxTargets { bank, items });
                let out = defense_mod::defended_loss(
                    d,
                    &exp.loss,
                    &self.net,
                    &self.loss_params,
                    images,
                    labels,
                    &self.defense_state,
                    ux,
                    rng,
                )?;
                self.pending_adv_loss = Some(out.adv_loss);
                self.defense_state.steps_done += 1;
                (out.loss, out.diag)
            }
            None => {
                let emb = self.net.forward(images);
                let out = loss::compute(&exp.loss, emb.clone(), labels, &self.loss_params, rng)?;
                let tr = match &out.triplets {
                    Some(t) => t.clone(),
                    None => diagnostics::spc2_random_triplets(labels),
                };
                let diag = diagnostics::batch_on_device(&emb, &tr, exp.loss.distance(), None);
                (out.loss, diag)
            }
        };
        let out = loss::LossOutput {
            loss: loss_t,
            triplets: None,
        };
        let value = crate::host::scalar(&out.loss)? as f64;
        ensure!(
            value.is_finite(),
            "the loss became {value} (diverged); lower train.optimizer.lr"
        );
        let mut grads = out.loss.backward();
        let g_net = GradientsParams::from_module(&mut grads, &self.net);
        let g_loss = GradientsParams::from_module(&mut grads, &self.loss_params);
        self.net = self.optim.step(exp.train.optimizer.lr, self.net, g_net);
        if let LossConfig::Margin(crate::loss::margin::Margin { beta_lr, .. }) = exp.loss
            && self.loss_params.beta.is_some()
        {
            self.loss_params = self.optim_loss.step(beta_lr, self.loss_params, g_loss);
        }
        Ok((self, value, diag))
    }

    fn save_checkpoint(&self, run: &RunDir, state: &CheckpointState) -> Result<()> {
        run.save_checkpoint(|tmp| {
            let err = |e: burn::store::RecordError| anyhow::anyhow!("writing checkpoint: {e:?}");
            self.net.clone().save_file(tmp.join("model.bpk")).map_err(err)?;
            self.loss_params.clone().save_file(tmp.join("loss.bpk")).map_err(err)?;
            self.optim.save(tmp.join("optim.bpk")).map_err(err)?;
            self.optim_loss.save(tmp.join("optim_loss.bpk")).map_err(err)?;
            // Last: a checkpoint folder with a readable state.json is complete.
            write_json(&tmp.join(run_dir::STATE), state)
        })
    }

    fn load_checkpoint(mut self, dir: &Path) -> Result<(Self, CheckpointState)> {
        let state: CheckpointState = serde_json::from_slice(
            &std::fs::read(dir.join(run_dir::STATE))
                .with_context(|| format!("{}: no checkpoint to resume", dir.display()))?,
        )
        .with_context(|| format!("{}/state.json is corrupt", dir.display()))?;
        let err = |e: burn::store::RecordError| anyhow::anyhow!("{}: cannot load checkpoint: {e:?}", dir.display());
        self.net = self.net.try_load_file(dir.join("model.bpk")).map_err(err)?;
        self.loss_params = self.loss_params.try_load_file(dir.join("loss.bpk")).map_err(err)?;
        self.optim = self.optim.load(dir.join("optim.bpk")).map_err(err)?;
        self.optim_loss = self.optim_loss.load(dir.join("optim_loss.bpk")).map_err(err)?;
        Ok((self, state))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckpointState {
    epochs_done: usize,
    history: Vec<EpochRecord>,
    train_seconds: f64,
    config_toml: String,
    #[serde(default)]
    defense_state: DefenseState,
}

/// Trains the experiment; writes `model.safetensors`, `run.json`, `log.jsonl` and a resumable
/// checkpoint into `opts.out`. The config, the data and the output folder are checked before
/// anything is written; a finished or interrupted run in `opts.out` is continued only with
/// `opts.resume` and replaced only with `opts.overwrite` (see [`RunDir`]).
pub fn train(exp: &Experiment, opts: &TrainOptions, device: &Device) -> Result<RunReport> {
    ensure!(
        !(opts.resume && opts.overwrite),
        "--resume and --overwrite exclude each other: continue the run, or replace it"
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
        eprintln!(
            "warning: {}: the replaced run could not be put back: {e:#}",
            opts.out.display()
        );
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
        write_json(&run.file(run_dir::RUN), &done.report(exp, false))?;
    }
    // The saved model is the evaluation-mode snapshot (running statistics of the last step).
    trainer.net.valid().save(&run.file(run_dir::MODEL))?;
    write_atomic(&run.file(run_dir::CONFIG), config_toml.as_bytes())?;
    let report = done.report(exp, true);
    write_json(&run.file(run_dir::RUN), &report)?;
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
    let ckpt = run
        .checkpoint()
        .with_context(|| format!("{}: no complete checkpoint to resume", opts.out.display()))?;
    let (mut trainer, state) = trainer.load_checkpoint(&ckpt)?;
    let keys: Vec<String> = config_diff(&state.config_toml, config_toml)
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
    trainer.defense_state = state.defense_state.clone();
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
    ensure!(steps >= 1, "--steps must be ≥ 1");
    let device = device.clone().autodiff();
    let mut bank_set = None;
    let (images, labels, items, shape) = match random_shape {
        Some(shape) => {
            let per = exp.train.sampler.per_class();
            let n = exp.train.sampler.batch_size();
            let labels: Vec<u32> = (0..n).map(|i| (i / per) as u32).collect();
            let [c, h, w] = shape;
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
        trainer.refresh_ux_bank(exp, set, &device)?;
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
