//! The pieces a training step updates (model, loss parameters, optimisers, defense state) and
//! the step itself, with the trainer's checkpoint.

use super::record::CheckpointState;
use crate::atomic::write_json;
use crate::config::Experiment;
use crate::defense::{self as defense_mod, DefenseState, EpochStart, Memory};
use crate::eval::diagnostics::DeviceDiagnostics;
use crate::kernel::adam::FusedAdam;
use crate::loss::{self, LossParams};
use crate::model::EmbeddingNet;
use crate::run_dir::{self, RunDir};
use anyhow::{Context, Result};
use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::Device;
use std::path::Path;

fn adam(cfg: &crate::config::OptimizerConfig) -> ModuleOptimizer {
    let decay = (cfg.weight_decay > 0.0).then_some(cfg.weight_decay as f32);
    ModuleOptimizer::from(FusedAdam::new(cfg.beta1, cfg.beta2, cfg.epsilon, decay))
}

/// The pieces a training step updates.
pub struct Trainer {
    pub net: EmbeddingNet,
    pub loss_params: LossParams,
    pub defense_state: DefenseState,
    /// The defense's memory ([`crate::defense::Defense::memory`]): the trainer tells it of
    /// epochs and steps, reads what it asks with each step's loss, and checkpoints it.
    pub defense_memory: Box<dyn Memory>,
    optim: ModuleOptimizer,
    optim_loss: ModuleOptimizer,
    /// Steps this process took, and whether the weights came from a checkpoint: a loss that is
    /// not finite before the first update is not the learning rate's doing.
    steps: u64,
    resumed: bool,
}

impl Trainer {
    pub fn new(exp: &Experiment, in_shape: [usize; 3], device: &Device) -> Result<Self> {
        let net = crate::seeded(device, exp.seed, || EmbeddingNet::new(&exp.model, in_shape, device))?;
        let loss_params = LossParams::new(&exp.loss, device);
        Ok(Self {
            net,
            loss_params,
            defense_state: DefenseState::default(),
            defense_memory: exp.defense.as_ref().map_or_else(
                || Box::new(defense_mod::memory::Nothing) as Box<dyn Memory>,
                |d| d.unit().memory(),
            ),
            optim: adam(&exp.train.optimizer),
            optim_loss: adam(&exp.train.optimizer),
            steps: 0,
            resumed: false,
        })
    }

    /// The step's loss, read back; what the defense's memory asks to read (HM's LGA: this
    /// step's adversarial loss, for its next step) comes back in the same read.
    fn read_loss(&mut self, loss: &burn::tensor::Tensor<1>) -> Result<f32> {
        let Some(wanted) = self.defense_memory.to_read() else {
            return crate::host::scalar(loss);
        };
        let both = burn::tensor::Tensor::cat(vec![loss.clone().detach().without_autodiff(), wanted], 0);
        match crate::host::read1(&both)?.as_slice() {
            &[value, wanted] => {
                self.defense_memory.read(wanted);
                Ok(value)
            }
            v => anyhow::bail!("expected two values from the device, got {}", v.len()),
        }
    }

    /// Reads what the defense's memory still asks, and copies what it keeps into
    /// `defense_state` (before a checkpoint).
    pub fn settle_defense_state(&mut self) -> Result<()> {
        if let Some(t) = self.defense_memory.to_read() {
            let v = crate::host::scalar(&t)?;
            self.defense_memory.read(v);
        }
        self.defense_state.memory = self.defense_memory.save();
        Ok(())
    }

    /// Restores `state`, the defense's memory included (a resumed run).
    pub fn restore_defense_state(&mut self, state: &DefenseState) -> Result<()> {
        self.defense_memory.restore(&state.memory)?;
        self.defense_state = state.clone();
        Ok(())
    }

    /// Tells the defense's memory an epoch starts (MDProp's UX embeds the training set).
    pub fn start_epoch(&mut self, exp: &Experiment, train: &crate::data::ImageSet, device: &Device) -> Result<()> {
        let model = crate::attack::oracle::Net::new(&self.net, 0);
        let at = EpochStart {
            model: &model,
            train,
            batch: exp.eval.batch_size,
            device,
        };
        self.defense_memory.start_epoch(&at)
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
        let (loss_t, diag, adv_loss) = super::defended::step_loss(
            exp.defense.as_ref(),
            &exp.loss,
            &self.net,
            &self.loss_params,
            images,
            (labels, items),
            (&self.defense_state, self.defense_memory.as_ref()),
            rng,
        )?;
        if let Some(adv) = adv_loss {
            self.defense_memory.after_step(&adv);
            self.defense_state.steps_done += 1;
        }
        let out = loss::LossOutput {
            loss: loss_t,
            triplets: None,
        };
        let value = f64::from(self.read_loss(&out.loss)?);
        if !value.is_finite() {
            let lr = exp.train.optimizer.lr;
            anyhow::bail!(if self.steps == 0 && !self.resumed {
                format!(
                    "the loss of the first batch is {value}, before any update (so not the learning rate's doing): \
                     the model's embeddings of these images or the loss's settings make it undefined; check \
                     [loss] and [model] (an input normalisation of zero spread, a margin or temperature of 0)"
                )
            } else {
                format!(
                    "the loss became {value} after {} step(s): training diverged; lower train.optimizer.lr (now {lr})",
                    self.steps
                )
            });
        }
        self.steps += 1;
        let mut grads = out.loss.backward();
        let g_net = GradientsParams::from_module(&mut grads, &self.net);
        let g_loss = GradientsParams::from_module(&mut grads, &self.loss_params);
        self.net = self.optim.step(exp.train.optimizer.lr, self.net, g_net);
        if let (Some(_), Some((_, lr))) = (&self.loss_params.beta, exp.loss.unit().trainable_beta()) {
            self.loss_params = self.optim_loss.step(lr, self.loss_params, g_loss);
        }
        Ok((self, value, diag))
    }

    pub(super) fn save_checkpoint(&self, run: &RunDir, state: &CheckpointState) -> Result<()> {
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

    pub(super) fn load_checkpoint(mut self, dir: &Path) -> Result<(Self, CheckpointState)> {
        self.resumed = true;
        let path = dir.join(run_dir::STATE);
        let bytes =
            crate::read::bookkeeping(&path).with_context(|| format!("{}: no checkpoint to resume", dir.display()))?;
        let state: CheckpointState = crate::read::json(
            &bytes,
            &path,
            "the checkpoint cannot be resumed: train the run again with ⟨overwrite!⟩",
        )?;
        let err = |e: burn::store::RecordError| anyhow::anyhow!("{}: cannot load checkpoint: {e:?}", dir.display());
        self.net = self.net.try_load_file(dir.join("model.bpk")).map_err(err)?;
        self.loss_params = self.loss_params.try_load_file(dir.join("loss.bpk")).map_err(err)?;
        self.optim = self.optim.load(dir.join("optim.bpk")).map_err(err)?;
        self.optim_loss = self.optim_loss.load(dir.join("optim_loss.bpk")).map_err(err)?;
        Ok((self, state))
    }
}
