//! The pieces a training step updates (model, loss parameters, optimisers, defense state) and
//! the step itself, with the trainer's checkpoint.

use super::record::CheckpointState;
use crate::atomic::write_json;
use crate::config::Experiment;
use crate::defense::{self as defense_mod, DefenseState};
use crate::eval::diagnostics::{self, DeviceDiagnostics};
use crate::kernel::adam::FusedAdam;
use crate::loss::{self, LossConfig, LossParams};
use crate::model::EmbeddingNet;
use crate::run_dir::{self, RunDir};
use anyhow::{Context, Result, ensure};
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

    /// The step's loss, read back; a defense that reads the previous step's adversarial loss
    /// (HM's LGA) gets it in the same read, so that its next step need not wait for it.
    fn read_loss(&mut self, exp: &Experiment, loss: &burn::tensor::Tensor<1>) -> Result<f32> {
        let reads_previous = exp.defense.as_ref().is_some_and(|d| d.unit().reads_previous_loss());
        match self.pending_adv_loss.take() {
            Some(adv) if reads_previous => {
                let both = burn::tensor::Tensor::cat(vec![loss.clone().detach().without_autodiff(), adv], 0);
                match crate::host::read1(&both)?.as_slice() {
                    &[value, adv] => {
                        self.defense_state.prev_loss = adv;
                        Ok(value)
                    }
                    v => anyhow::bail!("expected two values from the device, got {}", v.len()),
                }
            }
            pending => {
                self.pending_adv_loss = pending;
                crate::host::scalar(loss)
            }
        }
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
                // HM's linear gradual adversary has the last step's adversarial loss in
                // `defense_state` already: `read_loss` read it with that step's loss.
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
        let value = f64::from(self.read_loss(exp, &out.loss)?);
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
