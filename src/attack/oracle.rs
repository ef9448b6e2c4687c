//! A model as the attacks see it: an oracle that (a) embeds a batch of images and (b) returns
//! the gradient of a scalar of those embeddings with respect to the images, a vector–Jacobian
//! product. Objectives, selections and budgets stay in rdml; an oracle only embeds and pulls
//! back. rdml's own networks are one oracle ([`Net`]: burn's autodiff through the whole graph,
//! so their numbers are those of the fused graph bit for bit); a model held outside rdml (a
//! PyTorch module on its own device, called from the Python package) is another ([`External`]).
//! Black-box methods (NES) use (a) alone.
//!
//! A model outside rdml also holds the batch of a projected-gradient run where it can
//! ([`Oracle::held_steps`]): rdml hands it the clean rows, the start and the budget once; per step
//! only the embeddings of the rows that move and the objective's gradient on them cross; the
//! vector–Jacobian product, the step, the projection and the clamp run on the model's device.

use super::budget::Pgd;
pub use super::crossing::{Crossed, HeldBudget, NoisyBatch};
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use std::sync::Mutex;

/// What an attack needs of a model. Images are `[b, c, h, w]` in [0, 1] on a plain device; the
/// model normalises them itself, so budgets are in pixels.
pub trait Oracle: Send + Sync {
    /// The embeddings `[b, d]` of `x`, without gradient.
    fn embed(&self, x: Tensor<4>) -> Result<Tensor<2>>;

    /// `loss(embed(x))` (detached, `[1]`) and its gradient with respect to `x` (`None` where the
    /// loss does not reach the images). `loss` runs on rdml's device with autodiff.
    fn gradient(&self, x: Tensor<4>, loss: &dyn Fn(Tensor<2>) -> Tensor<1>) -> Result<Gradient>;

    /// Whether [`Oracle::gradient`] can be asked (white-box methods); a model that can only be
    /// queried is attacked by black-box methods alone.
    fn differentiable(&self) -> bool {
        true
    }

    /// What has crossed between rdml and the model so far (`None`: nothing crosses, the model
    /// is rdml's own network on rdml's device).
    fn crossed(&self) -> Option<Crossed> {
        None
    }

    /// Whether the model side draws smoothing's noisy copies itself ([`Oracle::embed_noisy`]).
    fn draws_noise(&self) -> bool {
        false
    }

    /// The embeddings of noisy copies drawn where the model lives ([`NoisyBatch`]); only asked
    /// of an oracle that [`Oracle::draws_noise`].
    fn embed_noisy(&self, batch: &NoisyBatch) -> Result<Tensor<2>> {
        let _ = batch;
        anyhow::bail!("model: draws no noise of its own")
    }

    /// The model side's own projected steps, where it holds the batch: from the clean rows `x0`
    /// (`[b, c, h, w]`) and the start `start` (`None`: `x0`; a random start as rdml drew it),
    /// under `pgd`, it embeds the rows at each step (keeping their graph) and asks
    /// `next(embeddings, k)` for the objective's gradient on them and whether another step
    /// follows (`None`: stop before stepping); it then pulls that gradient back to the images
    /// and takes the step (L∞ sign step or L2 normalised step, projection onto the ε-ball around
    /// `x0`, clamp to [0, 1]) itself. Returns the final images, or `None` where this oracle
    /// holds no batch and the engine steps the images (rdml's own networks: one device, nothing
    /// crosses).
    fn held_steps(
        &self,
        x0: &Tensor<4>,
        start: Option<&Tensor<4>>,
        pgd: &Pgd,
        next: &mut HeldStep,
    ) -> Result<Option<Tensor<4>>> {
        let _ = (x0, start, pgd, next);
        Ok(None)
    }
}

/// A held run's step on rdml's side: the moving rows' embeddings at step `k` in, the objective's
/// gradient on them and whether another step follows out (`None`: stop before stepping).
pub type HeldStep<'a> = dyn FnMut(Tensor<2>, usize) -> Result<Option<(Tensor<2>, bool)>> + 'a;

/// A loss and its gradient with respect to the images.
pub struct Gradient {
    pub loss: Tensor<1>,
    pub input: Option<Tensor<4>>,
}

/// The white-box methods' refusal of a model that gives no gradient.
pub fn require_gradient(oracle: &dyn Oracle) -> Result<()> {
    crate::ensure_input!(
        oracle.differentiable(),
        "the model gives no gradient (it was declared not differentiable), so a white-box method cannot \
         attack it: use method \"nes\" (a black-box gradient estimate from the model's outputs alone)"
    );
    Ok(())
}

/// An rdml network in evaluation mode (running batch-norm statistics, no parameter gradient),
/// inferring with batch-norm set `bn_set`.
pub struct Net {
    pub model: EmbeddingNet,
    pub bn_set: usize,
}

impl Net {
    /// `model` in evaluation mode with batch-norm set `bn_set`.
    pub fn new(model: &EmbeddingNet, bn_set: usize) -> Self {
        Self {
            model: model.valid(),
            bn_set,
        }
    }
}

impl Oracle for Net {
    fn embed(&self, x: Tensor<4>) -> Result<Tensor<2>> {
        Ok(self.model.forward_set(x, self.bn_set))
    }

    fn gradient(&self, x: Tensor<4>, loss: &dyn Fn(Tensor<2>) -> Tensor<1>) -> Result<Gradient> {
        let xi = x.autodiff().require_grad();
        let l = loss(self.model.forward_set(xi.clone(), self.bn_set));
        let value = l.clone().detach().without_autodiff();
        let grads = l.backward();
        Ok(Gradient {
            loss: value,
            input: xi.grad(&grads).map(|g| g.without_autodiff()),
        })
    }
}

/// What a [`HostModel`] answers for a batch: its embeddings' values (row-major) and shape, and
/// whether they carry a gradient back to the images (when asked to keep it).
pub struct Embedded {
    pub values: Vec<f32>,
    pub shape: Vec<usize>,
    pub has_gradient: bool,
}

/// A model outside rdml, asked with host arrays (row-major float32): what a binding implements
/// (the Python package's PyTorch modules). [`External`] asks it from one thread at a time and
/// pulls back right after the embedding that kept its graph.
pub trait HostModel: Send + Sync {
    /// The embeddings of `images` (`shape` = `[b, c, h, w]`); with `keep`, the model keeps what
    /// [`HostModel::pull_back`] needs for this batch.
    fn embed(&self, images: &[f32], shape: [usize; 4], keep: bool) -> Result<Embedded>;

    /// The gradient with respect to the images of the last batch embedded with `keep`, of the
    /// embeddings' inner product with `grad` (`b × d`): `b × c × h × w` values.
    fn pull_back(&self, grad: &[f32]) -> Result<Vec<f32>>;

    /// Whether [`HostModel::pull_back`] can be asked.
    fn differentiable(&self) -> bool;

    /// Whether the model side can hold a run's batch ([`HostModel::hold`], `step`, `release`).
    fn holds(&self) -> bool {
        false
    }

    /// Starts a held run: keeps the clean rows `images` (`shape`) and the start (`start`, `None`:
    /// the clean rows) where the model lives, and embeds the start keeping its graph.
    fn hold(&self, images: &[f32], start: Option<&[f32]>, shape: [usize; 4], budget: HeldBudget) -> Result<Embedded> {
        let _ = (images, start, shape, budget);
        anyhow::bail!("model: holds no batch of its own")
    }

    /// Pulls `grad` (`b × d`, on the last embeddings) back to the held images, takes the step
    /// there, and with `more` embeds the stepped images keeping their graph.
    fn step(&self, grad: &[f32], more: bool) -> Result<Option<Embedded>> {
        let _ = (grad, more);
        anyhow::bail!("model: holds no batch of its own")
    }

    /// The held images as they stand (`b × c × h × w` values), ending the run.
    fn release(&self) -> Result<Vec<f32>> {
        anyhow::bail!("model: holds no batch of its own")
    }

    /// The embeddings of `batch`'s noisy copies, drawn on the model's side (asked where
    /// [`HostModel::holds`]).
    fn embed_noisy(&self, batch: &NoisyBatch) -> Result<Embedded> {
        let _ = batch;
        anyhow::bail!("model: draws no noise of its own")
    }
}

/// A [`HostModel`] as an oracle on rdml's `device`: every answer checked (its shape, the same
/// embedding width every time, finite values), so a wrong model is an error, never a number.
pub struct External {
    model: Box<dyn HostModel>,
    device: Device,
    dim: Mutex<Option<usize>>,
    /// Held from an embedding that keeps its graph to its pull-back: one batch in flight.
    in_flight: Mutex<()>,
    crossed: Mutex<Crossed>,
}

impl External {
    pub fn new(model: Box<dyn HostModel>, device: &Device) -> Self {
        Self {
            model,
            device: device.clone().without_autodiff(),
            dim: Mutex::new(None),
            in_flight: Mutex::new(()),
            crossed: Mutex::new(Crossed::default()),
        }
    }

    /// What has crossed to and from the model so far.
    pub fn crossed(&self) -> Crossed {
        *self.crossed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut Crossed)) {
        f(&mut self.crossed.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// `x`'s values and shape on the host.
    fn host(x: Tensor<4>) -> Result<(Vec<f32>, [usize; 4])> {
        let shape = x.dims();
        let [b, c, h, w] = shape;
        let v = crate::host::read(&x.reshape([b, c * h * w]))?;
        Ok((v, shape))
    }

    /// The model's embeddings of `x`, checked, as a `[b, d]` tensor.
    fn forward(&self, x: Tensor<4>, keep: bool) -> Result<(Tensor<2>, [usize; 4])> {
        let (v, shape) = Self::host(x)?;
        let e = self.model.embed(&v, shape, keep)?;
        let out = (v.len() as u64 + e.values.len() as u64) * 4;
        self.count(|c| {
            (c.bytes, c.calls, c.forwards) = (c.bytes + out, c.calls + 1, c.forwards + 1);
        });
        Ok((self.checked(e, shape[0], keep)?, shape))
    }

    /// `e`, the model's answer for `b` images, checked (its shape, one width every time, finite
    /// values, a graph where `keep` asked for one) and made a `[b, d]` tensor.
    fn checked(&self, e: Embedded, b: usize, keep: bool) -> Result<Tensor<2>> {
        crate::ensure_input!(
            e.shape.len() == 2 && e.shape[0] == b && e.shape[1] >= 1,
            "model: returned a tensor of shape {:?} for {b} images; expected {b} × D embeddings",
            e.shape
        );
        crate::ensure_input!(
            crate::read::declared_len(&e.shape) == Some(e.values.len()),
            "model: returned {} values for the shape {:?}",
            e.values.len(),
            e.shape
        );
        crate::ensure_input!(
            !keep || e.has_gradient,
            "model: its embeddings carry no gradient back to the images (it is not differentiable, or it \
             runs without autograd), so a white-box method cannot attack it: use method \"nes\", a black-box \
             gradient estimate from its outputs alone"
        );
        let d = e.shape[1];
        let mut known = self.dim.lock().unwrap_or_else(|p| p.into_inner());
        let first = *known.get_or_insert(d);
        crate::ensure_input!(
            d == first,
            "model: returned {d}-dimensional embeddings after {first}-dimensional ones; expected one width"
        );
        if let Some(i) = e.values.iter().position(|v| !v.is_finite()) {
            return Err(crate::input_error(format!(
                "model: returned a non-finite embedding value ({}) for image {} of a batch of {b} \
                 (dimension {}); rdml scores finite embeddings only",
                e.values[i],
                i / d,
                i % d
            )));
        }
        Ok(Tensor::<2>::from_data(TensorData::new(e.values, [b, d]), &self.device))
    }

    /// A held run's steps from its first embeddings: `next` asked each step, the model side
    /// stepping until it says stop, each answer checked (embeddings exactly when more were asked).
    fn steps_held(&self, first: Embedded, b: usize, next: &mut HeldStep) -> Result<()> {
        let mut emb = self.checked(first, b, true);
        for k in 0.. {
            let Some((g, more)) = next(emb?, k)? else { break };
            let g = crate::host::read(&g.without_autodiff())?;
            let answer = self.model.step(&g, more)?;
            crate::ensure_input!(
                answer.is_some() == more,
                "model: a held step answered {} embeddings where {} asked",
                if answer.is_some() { "with" } else { "without" },
                if more { "more were" } else { "none were" }
            );
            let bytes = (g.len() + answer.as_ref().map_or(0, |e| e.values.len())) as u64 * 4;
            self.count(|c| {
                (c.step_bytes, c.steps, c.backwards) = (c.step_bytes + bytes, c.steps + 1, c.backwards + 1);
                c.most_step_bytes = c.most_step_bytes.max(bytes);
                c.forwards += u64::from(answer.is_some());
            });
            match answer {
                Some(e) => emb = self.checked(e, b, true),
                None => break,
            }
        }
        Ok(())
    }

    /// The images a held run ended with, checked.
    fn released(&self, shape: [usize; 4]) -> Result<Tensor<4>> {
        let back = self.model.release()?;
        let n = crate::read::declared_len(&shape).unwrap_or(usize::MAX);
        self.count(|c| (c.bytes, c.calls) = (c.bytes + back.len() as u64 * 4, c.calls + 1));
        crate::ensure_input!(
            back.len() == n,
            "model: a held run ended with {} image values; expected {n} ({:?})",
            back.len(),
            shape
        );
        Ok(Tensor::<4>::from_data(TensorData::new(back, shape), &self.device))
    }
}

impl Oracle for External {
    fn embed(&self, x: Tensor<4>) -> Result<Tensor<2>> {
        let _one_batch = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.forward(x, false)?.0)
    }

    fn gradient(&self, x: Tensor<4>, loss: &dyn Fn(Tensor<2>) -> Tensor<1>) -> Result<Gradient> {
        require_gradient(self)?;
        let _one_batch = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let (emb, shape) = self.forward(x, true)?;
        let e = emb.autodiff().require_grad();
        let l = loss(e.clone());
        let value = l.clone().detach().without_autodiff();
        let grads = l.backward();
        let Some(g) = e.grad(&grads) else {
            return Ok(Gradient {
                loss: value,
                input: None,
            });
        };
        let g = crate::host::read(&g.without_autodiff())?;
        let back = self.model.pull_back(&g)?;
        let moved = (g.len() + back.len()) as u64 * 4;
        self.count(|c| (c.bytes, c.calls, c.backwards) = (c.bytes + moved, c.calls + 1, c.backwards + 1));
        let n = crate::read::declared_len(&shape).unwrap_or(usize::MAX);
        crate::ensure_input!(
            back.len() == n,
            "model: the gradient with respect to the images has {} values; expected {n} ({:?})",
            back.len(),
            shape
        );
        crate::ensure_input!(
            back.iter().all(|v| v.is_finite()),
            "model: the gradient with respect to the images holds NaN or infinite values"
        );
        Ok(Gradient {
            loss: value,
            input: Some(Tensor::<4>::from_data(TensorData::new(back, shape), &self.device)),
        })
    }

    fn differentiable(&self) -> bool {
        self.model.differentiable()
    }

    fn crossed(&self) -> Option<Crossed> {
        Some(External::crossed(self))
    }

    fn draws_noise(&self) -> bool {
        self.model.holds()
    }

    fn embed_noisy(&self, batch: &NoisyBatch) -> Result<Tensor<2>> {
        let _one_batch = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let e = self.model.embed_noisy(batch)?;
        let pixels: usize = batch.new.iter().map(|(_, p)| p.len()).sum();
        let step = (e.values.len() + 2 * batch.rows.len() + batch.drop.len()) as u64 * 4;
        self.count(|c| {
            (c.bytes, c.calls) = (c.bytes + pixels as u64 * 4, c.calls + u64::from(pixels > 0));
            (c.step_bytes, c.steps, c.forwards) = (c.step_bytes + step, c.steps + 1, c.forwards + 1);
            c.most_step_bytes = c.most_step_bytes.max(step);
        });
        self.checked(e, batch.rows.len(), false)
    }

    fn held_steps(
        &self,
        x0: &Tensor<4>,
        start: Option<&Tensor<4>>,
        pgd: &Pgd,
        next: &mut HeldStep,
    ) -> Result<Option<Tensor<4>>> {
        if !self.model.holds() {
            return Ok(None);
        }
        require_gradient(self)?;
        let _one_batch = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let (clean, shape) = Self::host(x0.clone())?;
        let b = shape[0];
        // The start crosses only where it is not the clean rows (a random start, drawn by rdml
        // so that a seed gives the same images on every route).
        let start_values = start.map(|s| Self::host(s.clone())).transpose()?.map(|s| s.0);
        let budget = HeldBudget {
            norm: pgd.norm,
            eps: pgd.eps,
            step: pgd.step,
            project: pgd.project,
        };
        let first = self.model.hold(&clean, start_values.as_deref(), shape, budget)?;
        let sent = (clean.len() + start_values.as_ref().map_or(0, Vec::len) + first.values.len()) as u64 * 4;
        self.count(|c| (c.bytes, c.calls, c.forwards) = (c.bytes + sent, c.calls + 1, c.forwards + 1));
        let stepped = self.steps_held(first, b, next);
        if stepped.is_err() {
            // The model side lets go of the run (its images and graph) whatever stopped it; the
            // first error is the one said.
            let _ = self.model.release();
        }
        stepped?;
        self.released(shape).map(Some)
    }
}
