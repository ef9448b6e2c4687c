//! The interface every defense implements: an inner maximisation over the model's oracle (which
//! rows of a training batch move, toward what, under which budget; the model is asked only what
//! an attack asks: embed, and a vector–Jacobian product) and an outer loss over the embeddings
//! the model gives in training mode, whose gradient rdml computes. Who owns the parameters does
//! the rest: rdml's trainer carries the gradient through its network, a PyTorch loop through its
//! module. With the budget, the two halves of a step as a defense sees them, and what it returns.

use super::generated::Generated;
use super::memory::{Memory, Nothing};
use crate::attack::budget::{Norm, Pgd};
use crate::attack::oracle::Oracle;
use crate::eval::diagnostics::DeviceDiagnostics;
use crate::loss::distance::Distance;
use crate::loss::miner::{Mining, Triplets};
use crate::loss::{self, LossConfig, LossParams};
use anyhow::Result;
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One defense (`[defense] kind = …`), implemented by its config type in its own file.
pub trait Defense {
    /// The inner maximisation's L∞ budget, in pixel units.
    fn budget(&self) -> Budget;

    /// This step's PGD (CA-TRIDE's progressive step grows with the epoch).
    fn pgd(&self, _state: &DefenseState) -> Pgd {
        self.budget().pgd()
    }

    /// Checks the parameters beyond the budget, against the loss they train with.
    fn validate(&self, _loss: &LossConfig) -> Result<()> {
        Ok(())
    }

    /// Whether its steps follow the epoch ([`DefenseState::epoch`]: CA-TRIDE's progressive step
    /// and margin schedule), so that a caller's loop must say when each epoch starts.
    fn scheduled(&self) -> bool {
        false
    }

    /// Whether its outer loss is the configured loss alone, summed over the batches the plan's
    /// forwards hold (each forward whole batches of the labels, in order: EST's shifted batch,
    /// MDProp's distributions), so that a caller may put any loss of its own in its place.
    fn outer_is_the_loss(&self) -> bool {
        false
    }

    /// Whether it perturbs mined triplets and so trains on the triplet loss.
    fn triplet_based(&self) -> bool {
        false
    }

    /// The generated distributions of MDProp / AdvProp-D, each with its own BN set.
    fn distributions(&self) -> Vec<Generated> {
        vec![]
    }

    /// Batch-norm sets the model needs: one per distribution, the clean one included.
    fn bn_sets(&self) -> usize {
        1 + self.distributions().len()
    }

    /// What it keeps between steps and epochs, fresh (HM's LGA: the previous adversarial loss;
    /// MDProp's UX: the training set's features).
    fn memory(&self) -> Box<dyn Memory> {
        Box::new(Nothing)
    }

    /// The inner maximisation over the model's oracles (evaluation mode, nothing of the model
    /// changed): the perturbed rows next to the originals, and what the model is to embed in
    /// training mode for [`Defense::outer`].
    fn inner(&self, step: &mut Inner) -> Result<Plan>;

    /// The outer loss, a function of `emb`: the training-mode embeddings of `plan.forwards`, one
    /// tensor each, in order (for the triplet defenses, `triplets::adversarial_outer`).
    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss>;
}

/// The PGD budget alone (`eps`, `step`, `steps` in pixel units) and where the inner
/// maximisation starts (`start`, `noise`) and whether it projects (`project`): the parameters of
/// Madry, EST, ACT, AdvProp-D and seed 000's formulations 1 and 2. The other defenses read the
/// same keys into their own tables ([`Budget::of`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub eps: f32,
    pub step: f32,
    pub steps: usize,
    #[serde(default, skip_serializing_if = "Start::is_clean")]
    pub start: Start,
    /// N-FGSM's noise radius in units of ε (`start = "noise"`; 2 when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<f32>,
    #[serde(default = "crate::field::yes", skip_serializing_if = "crate::field::is_yes")]
    pub project: bool,
}

/// Where the inner maximisation starts (`[defense] start = …`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Start {
    /// The clean images (every defense's paper and reference code).
    #[default]
    Clean,
    /// A uniform point of the ε-box (FGSM-RS, Wong et al. ICLR'20).
    Uniform,
    /// Uniform noise of `noise`·ε, 2ε unless given (N-FGSM, de Jorge et al. NeurIPS'22).
    Noise,
}

impl Start {
    pub fn is_clean(&self) -> bool {
        *self == Start::Clean
    }
}

/// N-FGSM's noise radius, in units of ε, when `noise` is not given.
pub const NFGSM_NOISE: f32 = 2.0;

impl Budget {
    /// The budget `eps`, `step`, `steps` with a start, its noise and the projection, as a
    /// defense's own table reads the same keys.
    pub fn of(eps: f32, step: f32, steps: usize, (start, noise, project): (Start, Option<f32>, bool)) -> Self {
        Self {
            eps,
            step,
            steps,
            start,
            noise,
            project,
        }
    }

    /// L∞ PGD from the start the budget says (the clean point by default), projected onto the
    /// ε-ball unless `project` is off.
    pub fn pgd(self) -> Pgd {
        Pgd {
            eps: self.eps,
            step: self.step,
            steps: self.steps,
            norm: Norm::Linf,
            random_start: self.start != Start::Clean,
            start_radius: match self.start {
                Start::Noise => self.noise.unwrap_or(NFGSM_NOISE),
                _ => 1.0,
            },
            project: self.project,
        }
    }

    /// The start's keys against each other (`noise` belongs to `start = "noise"`), before the
    /// PGD's own checks.
    pub fn validate(&self) -> Result<()> {
        if let Some(k) = self.noise {
            anyhow::ensure!(
                self.start == Start::Noise,
                "defense.noise = {k} is the radius of N-FGSM's start, in units of ε: it needs defense.start = \"noise\" (got \"{}\")",
                match self.start {
                    Start::Clean => "clean",
                    Start::Uniform => "uniform",
                    Start::Noise => "noise",
                }
            );
        }
        self.pgd().validate_as("defense.")
    }
}

/// Where training stands, for a defense's schedules, and what its memory keeps (checkpointed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DefenseState {
    pub steps_done: u64,
    /// The current epoch (0-based) and the run's epoch count, for schedules.
    #[serde(default)]
    pub epoch: usize,
    #[serde(default)]
    pub epochs: usize,
    /// The defense's [`Memory::save`] as of the checkpoint (HM's `prev_loss`, where checkpoints
    /// of earlier rdml kept it as a field of its own).
    #[serde(flatten)]
    pub memory: serde_json::Map<String, serde_json::Value>,
}

impl Default for DefenseState {
    fn default() -> Self {
        Self {
            steps_done: 0,
            epoch: 0,
            epochs: 1,
            memory: serde_json::Map::new(),
        }
    }
}

impl DefenseState {
    /// The same state with `key` of the memory saved as `value` (tests and tools set HM's
    /// `prev_loss` so).
    pub fn remembering(mut self, key: &str, value: f32) -> Self {
        self.memory.insert(key.into(), serde_json::json!(value));
        self
    }
}

/// The inner half of a defended step as a defense sees it.
pub struct Inner<'a> {
    /// The configured loss (and its miner).
    pub loss: &'a LossConfig,
    /// The model as the attacks see it, one oracle per batch-norm set (index: the set; set 0
    /// the clean one, the only one a model without several sets has).
    pub models: &'a [&'a dyn Oracle],
    /// The batch, `[b, c, h, w]` in [0, 1] on a plain device.
    pub x: Tensor<4>,
    pub labels: &'a [u32],
    /// The batch items' positions in the training set.
    pub items: &'a [usize],
    pub state: &'a DefenseState,
    /// The defense's own memory ([`Defense::memory`]), as its caller keeps it.
    pub memory: &'a dyn Memory,
    pub rng: &'a mut ChaCha8Rng,
    /// Triplets the caller mined (a reference code's batch, replayed), taken by
    /// [`Inner::triplets`] in place of the loss's miner.
    pub given: Option<Triplets>,
}

impl<'a> Inner<'a> {
    /// The batch's triplets: the caller's when given, else the loss's miner's on `clean`.
    pub fn triplets(&mut self, clean: &Clean) -> Result<Triplets> {
        match self.given.take() {
            Some(t) => Ok(t),
            None => clean.mine(self.loss, self.labels, self.rng),
        }
    }

    /// The seed of this PGD run's random start, drawn from the step's stream only where `pgd`
    /// starts at random (a clean start leaves the stream, and so every run of today's settings,
    /// as it was).
    pub fn start_seed(&mut self, pgd: &Pgd) -> u64 {
        if pgd.random_start {
            rand::Rng::random(self.rng)
        } else {
            0
        }
    }

    /// The model inferring with its clean batch-norm set.
    pub fn model(&self) -> Result<&'a dyn Oracle> {
        self.model_at(0)
    }

    /// The model inferring with batch-norm set `set`.
    pub fn model_at(&self, set: usize) -> Result<&'a dyn Oracle> {
        self.models.get(set).copied().ok_or_else(|| {
            crate::input_error(format!(
                "the defense generates with batch-norm set {set}, but the model was given with {} set(s)",
                self.models.len()
            ))
        })
    }
}

/// What the inner maximisation hands to the outer loss: the perturbed rows, and what the model
/// embeds in training mode (each a batch of images and the batch-norm set it goes through).
pub struct Plan {
    pub perturbed: Perturbed,
    pub forwards: Vec<Forward>,
}

impl Plan {
    /// The plan of a defense trained on its adversarial rows alone, through the clean set.
    pub fn adversarial(perturbed: Perturbed) -> Self {
        let forwards = vec![Forward {
            images: perturbed.adversarial.clone(),
            bn_set: 0,
        }];
        Self { perturbed, forwards }
    }
}

/// One training-mode forward of the outer step: images (plain device) and the batch-norm set.
#[derive(Clone)]
pub struct Forward {
    pub images: Tensor<4>,
    pub bn_set: usize,
}

/// The outer half of a defended step as a defense sees it.
pub struct Outer<'a> {
    pub loss: &'a LossConfig,
    pub params: &'a LossParams,
    pub labels: &'a [u32],
    pub state: &'a DefenseState,
    pub rng: &'a mut ChaCha8Rng,
}

/// The one embedding tensor of a plan with one forward.
pub fn one(emb: Vec<Tensor<2>>) -> Result<Tensor<2>> {
    let n = emb.len();
    let mut it = emb.into_iter();
    match (it.next(), n) {
        (Some(e), 1) => Ok(e),
        _ => Err(crate::input_error(format!(
            "the outer loss takes the embeddings of one forward, got {n}"
        ))),
    }
}

/// What one defended training step produces: the loss to minimise and the diagnostics.
pub struct DefendedLoss {
    pub loss: Tensor<1>,
    /// The adversarial part of the loss, detached and left on the device (HM's LGA reads it at
    /// its next step).
    pub adv_loss: Tensor<1>,
    pub diag: DeviceDiagnostics,
}

/// The inner maximisation's result: the perturbed rows next to the originals. For triplet
/// defenses the rows are the stacked `[a, p, n]` of `triplets`; for EST the batch itself.
pub struct Perturbed {
    pub triplets: Option<Triplets>,
    /// Clean evaluation-mode embeddings of the batch, used for mining and the diagnostics.
    pub clean: Clean,
    pub dim: usize,
    pub original: Tensor<4>,
    pub adversarial: Tensor<4>,
}

/// The batch's clean evaluation-mode embeddings (robrank mines on the model's current
/// embeddings before perturbing): on the device, read back only by what needs them on the host
/// (a distance-based miner on the CPU's host miners, HM's hardness there), once.
pub struct Clean {
    pub emb: Tensor<2>,
    host: std::cell::OnceCell<Vec<f32>>,
}

impl Clean {
    /// The clean embeddings of `x` by `model` (its clean set, evaluation mode).
    pub fn of(model: &dyn Oracle, x: &Tensor<4>) -> Result<Self> {
        Ok(Self {
            emb: model.embed(x.clone().without_autodiff())?,
            host: std::cell::OnceCell::new(),
        })
    }

    pub fn dim(&self) -> usize {
        self.emb.dims()[1]
    }

    /// The host copy, read on first use.
    pub fn host(&self) -> Result<&[f32]> {
        if self.host.get().is_none() {
            let v = crate::host::read(&self.emb)?;
            let _ = self.host.set(v);
        }
        Ok(self.host.get().map_or(&[][..], |v| v.as_slice()))
    }

    /// The loss's triplets, mined where [`loss::mine_where`] says (on the CPU from the host
    /// copy, read once).
    pub fn mine(&self, loss_cfg: &LossConfig, labels: &[u32], rng: &mut ChaCha8Rng) -> Result<Triplets> {
        self.mine_with(&loss_cfg.mining(), loss_cfg.distance(), labels, rng)
    }

    /// Triplets under `mining` (CA-TRIDE's scheduled semihard margin), chosen as [`Clean::mine`]
    /// chooses them.
    pub fn mine_with(
        &self,
        mining: &Mining,
        distance: Distance,
        labels: &[u32],
        rng: &mut ChaCha8Rng,
    ) -> Result<Triplets> {
        loss::mine_where(mining, distance, &self.emb, labels, rng, || {
            self.host().map(std::borrow::Cow::Borrowed)
        })
    }

    /// The clean embeddings of batch rows `idx`, gathered where they are (no read).
    pub fn rows(&self, idx: &[usize]) -> Tensor<2> {
        let device = self.emb.device();
        if idx.is_empty() {
            return Tensor::zeros([0, self.dim()], &device);
        }
        crate::host::gather(&self.emb, &crate::host::index_tensor(idx, &device))
    }
}
