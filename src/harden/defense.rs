//! A defense in the caller's own training loop (`rdml.Defense`): the inner maximisation over the
//! caller's model as an oracle (one per batch-norm set), the images it hands back for the
//! caller's training-mode forwards, then the outer loss's value and gradient with respect to the
//! embeddings the caller computed. Between steps it keeps what rdml's trainer keeps: the
//! defense's state and memory, and the random stream the trainer would draw from.

use super::leaves::{self, Given};
use super::{GivenTriplets, Images, Stream, labels_of, some_triplets, tensor, training_set};
use crate::attack::oracle::{External, HostModel, Oracle};
use crate::defense::{DefenseConfig, DefenseState, EpochStart, Inner, Memory, Outer, Plan};
use crate::eval::diagnostics::BatchDiagnostics;
use crate::loss::LossConfig;
use anyhow::Result;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

/// `rdml.Defense(**table, loss=…)`: the `[defense]` and `[loss]` tables, read as a config's are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefenseRequest {
    pub defense: DefenseConfig,
    #[serde(default = "super::triplet", deserialize_with = "crate::loss::legacy::read")]
    pub loss: LossConfig,
    #[serde(default)]
    pub seed: u64,
}

/// One defense between the steps of a caller's loop.
pub struct DefenseSession {
    defense: DefenseConfig,
    loss: LossConfig,
    state: DefenseState,
    memory: Box<dyn Memory>,
    stream: Stream,
    device: Device,
    /// Whether the caller said which epoch it is (schedules need it).
    epoch_told: bool,
    /// The embeddings' width, as the first step gave it.
    width: Option<usize>,
    /// The labels of the training set given at the epoch's start (MDProp's UX), which the
    /// batches' `indices` point into.
    training_labels: Option<Vec<u32>>,
    /// The plan between the inner step and the outer one, with its labels.
    pending: Option<(Plan, Vec<u32>)>,
    /// A step of [`DefenseSession::perturb`] whose adversarial loss the memory waits for.
    awaiting_loss: bool,
    /// Whether a batch out of SPC-2's pair layout was said (once a session).
    layout_said: std::cell::Cell<bool>,
}

mod layout;
mod perturb;
mod saved;
pub use perturb::Perturbation;

/// What the caller embeds in training mode: each forward's images and batch-norm set.
pub struct Forwards {
    pub images: Vec<(Vec<f32>, [usize; 4])>,
    pub bn_sets: Vec<usize>,
    /// Rows of the perturbed tensor (the stacked triplets, or the batch), for the caller's records.
    pub perturbed_rows: usize,
    /// What crossed between rdml and the caller's model during the inner maximisation.
    pub route: crate::attack::oracle::Crossed,
}

/// The outer step's answer.
#[derive(Serialize)]
pub struct Stepped {
    pub loss: f32,
    /// The adversarial part of the loss (HM's LGA reads it at its next step).
    pub adversarial_loss: f32,
    pub diagnostics: BatchDiagnostics,
    pub beta_grad: Option<f32>,
    pub steps_done: u64,
    #[serde(skip)]
    pub grads: Vec<Vec<f32>>,
}

/// The session's checkpoint: the defense's state (its memory's keys included) and the stream.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    /// The defense that saved it (states of rdml before it was kept: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub state: DefenseState,
    pub stream: Stream,
    pub epoch_told: bool,
}

impl DefenseSession {
    pub fn open(r: DefenseRequest, device: &Device) -> Result<Self> {
        r.loss.validate(true).map_err(the_callers)?;
        r.defense.validate(&r.loss).map_err(the_callers)?;
        Ok(Self {
            memory: r.defense.unit().memory(),
            state: DefenseState::default(),
            stream: Stream::new(r.seed),
            device: device.clone().without_autodiff(),
            epoch_told: false,
            width: None,
            training_labels: None,
            pending: None,
            awaiting_loss: false,
            layout_said: std::cell::Cell::new(false),
            defense: r.defense,
            loss: r.loss,
        })
    }

    /// Batch-norm sets the model needs (one per generated distribution, the clean one included).
    pub fn bn_sets(&self) -> usize {
        self.defense.unit().bn_sets()
    }

    /// What the caller's front end needs to know of the defense before its first step.
    pub fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.defense.name(),
            "loss": self.loss.name(),
            "bn_sets": self.bn_sets(),
            "needs_training_set": self.memory.needs_training_set(),
            "scheduled": self.defense.unit().scheduled(),
            "outer_is_the_loss": self.defense.unit().outer_is_the_loss(),
            "remembers_loss": self.memory.reads_loss(),
            "pgd": self.defense.unit().pgd(&self.state),
        })
    }

    /// Epoch `epoch` (0-based) of `epochs` starts: schedules read it, the stream moves to the
    /// epoch's (as `rdml train` draws), and a memory that keeps the training set's features
    /// (MDProp's UX) embeds `train` by `model`.
    pub fn start_epoch(
        &mut self,
        (epoch, epochs): (usize, usize),
        model: Option<Box<dyn HostModel>>,
        train: Option<Images>,
        batch: usize,
    ) -> Result<()> {
        crate::ensure_input!(
            epochs >= 1 && epoch < epochs,
            "epoch: {epoch} of {epochs}; expected 0 ≤ epoch < epochs"
        );
        crate::ensure_input!(batch >= 1, "batch: must be ≥ 1");
        if !self.memory.needs_training_set() {
            crate::ensure_input!(
                model.is_none() && train.is_none(),
                "model, images: defense {} keeps nothing of the training set; its epoch's start takes the epoch alone",
                self.defense.name()
            );
        } else {
            let (Some(model), Some(train)) = (model, train) else {
                return Err(crate::input_error(format!(
                    "defense {}: its memory embeds the training set at each epoch's start: pass the model and \
                     the training images with their labels",
                    self.defense.name()
                )));
            };
            let set = training_set(train, "images")?;
            let oracle = External::new(model, &self.device);
            let at = EpochStart {
                model: &oracle,
                train: &set,
                batch,
                device: &self.device,
            };
            self.memory.start_epoch(&at)?;
            self.training_labels = Some(set.labels.clone());
        }
        (self.state.epoch, self.state.epochs, self.epoch_told) = (epoch, epochs, true);
        self.stream.at_epoch(epoch);
        Ok(())
    }

    /// The inner maximisation on `images` by `models` (one per batch-norm set): the images the
    /// caller is to embed in training mode.
    pub fn inner(
        &mut self,
        images: Images,
        items: Option<Vec<usize>>,
        triplets: Option<GivenTriplets>,
        models: Vec<Box<dyn HostModel>>,
    ) -> Result<Forwards> {
        let (plan, labels, route) = self.plan_of(images, items, triplets, models)?;
        let mut out = Forwards {
            images: vec![],
            bn_sets: vec![],
            perturbed_rows: plan.perturbed.adversarial.dims()[0],
            route,
        };
        for f in &plan.forwards {
            let shape = f.images.dims();
            let [b, c, h, w] = shape;
            out.images
                .push((crate::host::read(&f.images.clone().reshape([b, c * h * w]))?, shape));
            out.bn_sets.push(f.bn_set);
        }
        self.pending = Some((plan, labels));
        Ok(out)
    }

    /// The defense's plan for the batch, checked, its labels, and what crossed to the caller's
    /// model while it was made.
    fn plan_of(
        &mut self,
        images: Images,
        items: Option<Vec<usize>>,
        triplets: Option<GivenTriplets>,
        models: Vec<Box<dyn HostModel>>,
    ) -> Result<(Plan, Vec<u32>, crate::attack::oracle::Crossed)> {
        self.not_awaiting()?;
        let unit = self.defense.unit();
        crate::ensure_input!(
            self.epoch_told || !unit.scheduled(),
            "defense {}: its schedule follows the epoch, and no epoch's start was given (start_epoch: the epoch \
             and the epochs, at each epoch's start)",
            self.defense.name()
        );
        crate::ensure_input!(!models.is_empty(), "model: missing");
        let labels = labels_of(&images.labels, "labels")?;
        let n = labels.len();
        crate::ensure_input!(
            n >= 2,
            "images: {n} image(s); a defended step needs a batch of at least 2"
        );
        self.loss.unit().validate_batch(n).map_err(the_callers)?;
        let caller_triplets = triplets.is_some();
        let items = self.items(items, &labels)?;
        let given = triplets.map(|t| t.checked(&labels, "triplets")).transpose()?;
        let x = tensor(&images, &self.device)?;
        let oracles: Vec<External> = models.into_iter().map(|m| External::new(m, &self.device)).collect();
        let refs: Vec<&dyn Oracle> = oracles.iter().map(|o| o as &dyn Oracle).collect();
        let mut step = Inner {
            loss: &self.loss,
            models: &refs,
            x,
            labels: &labels,
            items: &items,
            state: &self.state,
            memory: self.memory.as_ref(),
            rng: self.stream.rng(),
            given,
        };
        let plan = unit.inner(&mut step)?;
        crate::ensure_input!(
            step.given.is_none(),
            "triplets: defense {} takes no triplets of the caller's (act, hm, madry and the positive-perturbation \
             defenses replay them)",
            self.defense.name()
        );
        if let Some(t) = &plan.perturbed.triplets {
            some_triplets(t.len())?;
            self.say_layout(&labels, caller_triplets);
        }
        let route = oracles
            .iter()
            .fold(Default::default(), |r: crate::attack::oracle::Crossed, o| {
                r.plus(o.crossed())
            });
        Ok((plan, labels, route))
    }

    /// The batch's positions in the training set given at the epoch's start, checked against its
    /// labels (MDProp's UX draws its targets there); none for the defenses that keep no set.
    fn items(&self, items: Option<Vec<usize>>, labels: &[u32]) -> Result<Vec<usize>> {
        let n = labels.len();
        let Some(train) = self
            .training_labels
            .as_ref()
            .filter(|_| self.memory.needs_training_set())
        else {
            crate::ensure_input!(
                !self.memory.needs_training_set(),
                "defense {} draws targets from the training set, and none was given at the epoch's start \
                 (start_epoch: the model, the training images and their labels)",
                self.defense.name()
            );
            crate::ensure_input!(
                items.is_none(),
                "indices: defense {} draws nothing from the training set; pass none",
                self.defense.name()
            );
            return Ok((0..n).collect());
        };
        let Some(items) = items else {
            return Err(crate::input_error(format!(
                "indices: defense {} draws targets from the training set: pass each image's position in the set \
                 given at the epoch's start",
                self.defense.name()
            )));
        };
        crate::ensure_input!(items.len() == n, "indices: {} for {n} images", items.len());
        for (k, (&i, &l)) in items.iter().zip(labels).enumerate() {
            crate::ensure_input!(
                train.get(i) == Some(&l),
                "indices: image {k} (label {l}) is given as item {i} of the training set, which {}",
                match train.get(i) {
                    Some(t) => format!("has label {t}"),
                    None => format!("holds {} items", train.len()),
                }
            );
        }
        Ok(items)
    }

    /// The outer loss of `embeddings` (one array per forward of the last inner step, in order)
    /// and its gradient with respect to each; the step is then done.
    pub fn outer(&mut self, embeddings: Vec<Given>, beta: Option<f32>) -> Result<Stepped> {
        self.not_awaiting()?;
        let Some((plan, labels)) = self.pending.take() else {
            return Err(crate::input_error(
                "the defense's outer step came without its inner step: no batch is pending",
            ));
        };
        let out = self.outer_of(&plan, &labels, embeddings, beta);
        if out.is_err() {
            // A wrong call leaves the step as it was: the same batch's embeddings may come again.
            self.pending = Some((plan, labels));
        }
        out
    }

    fn outer_of(&mut self, plan: &Plan, labels: &[u32], embeddings: Vec<Given>, beta: Option<f32>) -> Result<Stepped> {
        crate::ensure_input!(
            embeddings.len() == plan.forwards.len(),
            "embeddings: {} arrays for the {} forward(s) the defense handed back",
            embeddings.len(),
            plan.forwards.len()
        );
        let mut dim = self.width;
        let mut leaves = vec![];
        for (k, (given, f)) in embeddings.into_iter().zip(&plan.forwards).enumerate() {
            let what = format!("embeddings[{k}]");
            let rows = f.images.dims()[0];
            leaves.push(leaves::leaf(given, rows, &mut dim, (&what, &self.loss), &self.device)?);
        }
        let params = leaves::params(&self.loss, beta, &self.device)?;
        let out = self.defense.unit().outer(
            plan,
            leaves.clone(),
            &mut Outer {
                loss: &self.loss,
                params: &params,
                labels,
                state: &self.state,
                rng: self.stream.rng(),
            },
        )?;
        let pulled = leaves::pull(out.loss, &leaves, &params)?;
        let adversarial_loss = crate::host::scalar(&out.adv_loss)?;
        self.width = dim;
        self.memory.after_step(&out.adv_loss);
        if let Some(t) = self.memory.to_read() {
            let v = crate::host::scalar(&t)?;
            self.memory.read(v);
        }
        self.state.steps_done += 1;
        Ok(Stepped {
            loss: pulled.value,
            adversarial_loss,
            diagnostics: out.diag.read()?,
            beta_grad: pulled.beta_grad,
            steps_done: self.state.steps_done,
            grads: pulled.grads,
        })
    }

    /// The step done with the caller's own loss in place of the outer loss (a defense whose outer
    /// loss is the configured loss alone, [`crate::defense::Defense::outer_is_the_loss`]), and its
    /// adversarial part as the caller computed it.
    pub fn done_by_caller(&mut self, adversarial_loss: f32) -> Result<u64> {
        crate::ensure_input!(
            self.defense.unit().outer_is_the_loss(),
            "loss: defense {} trains on rdml's {} loss over what it perturbed; a loss the caller gives cannot \
             take its place (give it one of rdml's, as a [loss] table)",
            self.defense.name(),
            self.loss.name()
        );
        self.not_awaiting()?;
        self.end_step(Some(adversarial_loss))
    }

    /// Ends the pending step: the memory told its adversarial loss (when given), the steps
    /// counted.
    fn end_step(&mut self, adversarial_loss: Option<f32>) -> Result<u64> {
        if let Some(l) = adversarial_loss {
            crate::ensure_input!(l.is_finite(), "adversarial_loss: {l}; the loss must be a number");
        }
        crate::ensure_input!(
            self.pending.take().is_some(),
            "the defense's step ended without its inner step: no batch is pending"
        );
        if let Some(l) = adversarial_loss {
            let t = Tensor::<1>::from_floats([l], &self.device);
            self.memory.after_step(&t);
            if let Some(t) = self.memory.to_read() {
                let v = crate::host::scalar(&t)?;
                self.memory.read(v);
            }
        }
        self.state.steps_done += 1;
        Ok(self.state.steps_done)
    }

    /// What a checkpoint keeps of the session.
    pub fn save(&self) -> Saved {
        let mut state = self.state.clone();
        state.memory = self.memory.save();
        Saved {
            kind: Some(self.defense.name().to_string()),
            state,
            stream: self.stream.saved(),
            epoch_told: self.epoch_told,
        }
    }

    /// Takes back what [`DefenseSession::save`] kept.
    pub fn restore(&mut self, saved: Saved) -> Result<()> {
        self.check_saved(&saved)?;
        let stream = Stream::restored(saved.stream)?;
        self.memory.restore(&saved.state.memory).map_err(the_callers)?;
        self.state = saved.state;
        self.stream = stream;
        self.epoch_told = saved.epoch_told;
        self.pending = None;
        self.awaiting_loss = false;
        Ok(())
    }
}

/// A check of the caller's tables, the caller's error.
fn the_callers(e: anyhow::Error) -> anyhow::Error {
    crate::input_error(format!("{e:#}"))
}
