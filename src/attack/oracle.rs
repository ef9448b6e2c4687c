//! A model as the attacks see it: an oracle that (a) embeds a batch of images and (b) returns
//! the gradient of a scalar of those embeddings with respect to the images, a vector–Jacobian
//! product. Objectives, selections and budgets stay in rdml; an oracle only embeds and pulls
//! back. rdml's own networks are one oracle ([`Net`]: burn's autodiff through the whole graph,
//! so their numbers are those of the fused graph bit for bit); a model held outside rdml (a
//! PyTorch module on its own device, called from the Python package) is another ([`External`]).
//! Black-box methods (NES) use (a) alone.

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
}

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
}

/// A [`HostModel`] as an oracle on rdml's `device`: every answer checked (its shape, the same
/// embedding width every time, finite values), so a wrong model is an error, never a number.
pub struct External {
    model: Box<dyn HostModel>,
    device: Device,
    dim: Mutex<Option<usize>>,
    /// Held from an embedding that keeps its graph to its pull-back: one batch in flight.
    in_flight: Mutex<()>,
}

impl External {
    pub fn new(model: Box<dyn HostModel>, device: &Device) -> Self {
        Self {
            model,
            device: device.clone().without_autodiff(),
            dim: Mutex::new(None),
            in_flight: Mutex::new(()),
        }
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
        let b = shape[0];
        let e = self.model.embed(&v, shape, keep)?;
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
        Ok((
            Tensor::<2>::from_data(TensorData::new(e.values, [b, d]), &self.device),
            shape,
        ))
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
}
