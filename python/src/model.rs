//! The caller's model as the library's oracle: a Python object (`rdml/_torch.py`'s
//! `TorchModel`) behind [`rdml::attack::oracle::HostModel`].

use crate::words::{floats, invalid_or_raise, to_bytes};
use anyhow::Result;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use rdml::attack::budget::Norm;
use rdml::attack::oracle::{Embedded, HeldBudget, HostModel, NoisyBatch};
use std::sync::{Arc, Mutex};

/// A Python object standing for the caller's model (`rdml/_torch.py`'s `TorchModel`): `embed(images:
/// bytes, shape, keep) -> bytes` and `pull_back(grad: bytes) -> bytes`, float32 throughout. An
/// exception it raises (the user's model's own, a Ctrl-C) is kept and raised again as itself
/// when the library call returns.
pub struct PyModel {
    obj: Py<PyAny>,
    differentiable: bool,
    /// Whether the object holds a run's batch on the model's device (`hold`, `step`, `release`).
    holds: bool,
    raised: Arc<Mutex<Option<PyErr>>>,
}

/// The library error that stands for a Python exception kept by [`PyModel`].
pub(crate) const PY_RAISED: &str = "the model raised an exception";

impl PyModel {
    /// The caller's model object, its `differentiable` read once; its exceptions kept in `raised`.
    pub fn boxed(py: Python<'_>, obj: Py<PyAny>, raised: &Arc<Mutex<Option<PyErr>>>) -> PyResult<Box<dyn HostModel>> {
        let differentiable = obj.bind(py).getattr("differentiable")?.extract()?;
        let holds = obj.bind(py).hasattr("hold")?;
        Ok(Box::new(PyModel {
            obj,
            differentiable,
            holds,
            raised: raised.clone(),
        }))
    }

    /// Calls `method` with `args`, then reads its answer with `read`; a Python exception is kept.
    fn call<T>(
        &self,
        method: &str,
        args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyTuple>>,
        read: impl for<'py> FnOnce(Bound<'py, PyAny>) -> PyResult<T>,
    ) -> Result<T> {
        Python::with_gil(|py| {
            let out = args(py)
                .and_then(|a| self.obj.bind(py).call_method1(method, a))
                .and_then(read);
            out.map_err(|e| {
                // The first exception is the one said (a clean-up call after it may raise too).
                let mut kept = self.raised.lock().unwrap_or_else(|p| p.into_inner());
                if kept.is_none() {
                    *kept = Some(e);
                }
                anyhow::anyhow!(PY_RAISED)
            })
        })
    }
}

/// The `(bytes, shape, has_gradient)` a model's `embed`, `hold` or `step` answers, read.
fn embedded(r: Bound<'_, PyAny>) -> PyResult<Result<Embedded>> {
    let (b, shape, has_gradient) = r.extract::<(Bound<'_, PyBytes>, Vec<usize>, bool)>()?;
    Ok(floats(b.as_bytes(), "model")
        .map_err(|e| rdml::input_error(e.to_string()))
        .map(|values| Embedded {
            values,
            shape,
            has_gradient,
        }))
}

impl HostModel for PyModel {
    fn embed(&self, images: &[f32], shape: [usize; 4], keep: bool) -> Result<Embedded> {
        self.call(
            "embed",
            |py| {
                let s = PyTuple::new(py, shape)?;
                let k = keep.into_pyobject(py)?.to_owned();
                PyTuple::new(py, [to_bytes(py, images)?.into_any(), s.into_any(), k.into_any()])
            },
            embedded,
        )?
    }

    fn holds(&self) -> bool {
        self.holds
    }

    fn hold(&self, images: &[f32], start: Option<&[f32]>, shape: [usize; 4], budget: HeldBudget) -> Result<Embedded> {
        self.call(
            "hold",
            |py| {
                let start = match start {
                    Some(s) => to_bytes(py, s)?.into_any(),
                    None => py.None().into_bound(py),
                };
                let norm = match budget.norm {
                    Norm::Linf => "linf",
                    Norm::L2 => "l2",
                };
                let parts = [
                    to_bytes(py, images)?.into_any(),
                    start,
                    PyTuple::new(py, shape)?.into_any(),
                    norm.into_pyobject(py)?.into_any(),
                    budget.eps.into_pyobject(py)?.into_any(),
                    budget.step.into_pyobject(py)?.into_any(),
                    budget.project.into_pyobject(py)?.to_owned().into_any(),
                ];
                PyTuple::new(py, parts)
            },
            embedded,
        )?
    }

    fn step(&self, grad: &[f32], more: bool) -> Result<Option<Embedded>> {
        self.call(
            "step",
            |py| {
                let m = more.into_pyobject(py)?.to_owned();
                PyTuple::new(py, [to_bytes(py, grad)?.into_any(), m.into_any()])
            },
            |r| if r.is_none() { Ok(None) } else { embedded(r).map(Some) },
        )?
        .transpose()
    }

    fn embed_noisy(&self, batch: &NoisyBatch) -> Result<Embedded> {
        self.call(
            "embed_noisy",
            |py| {
                let new = batch
                    .new
                    .iter()
                    .map(|(s, px)| PyTuple::new(py, [s.into_pyobject(py)?.into_any(), to_bytes(py, px)?.into_any()]))
                    .collect::<PyResult<Vec<_>>>()?;
                let parts = [
                    new.into_pyobject(py)?.into_any(),
                    batch.drop.to_vec().into_pyobject(py)?.into_any(),
                    batch.rows.to_vec().into_pyobject(py)?.into_any(),
                    PyTuple::new(py, batch.shape)?.into_any(),
                    batch.sigma.into_pyobject(py)?.into_any(),
                    batch.seed.into_pyobject(py)?.into_any(),
                ];
                PyTuple::new(py, parts)
            },
            embedded,
        )?
    }

    fn release(&self) -> Result<Vec<f32>> {
        let values = self.call(
            "release",
            |py| Ok(PyTuple::empty(py)),
            |r| Ok(floats(r.downcast::<PyBytes>()?.as_bytes(), "model")),
        )?;
        values.map_err(|e| rdml::input_error(e.to_string()))
    }

    fn pull_back(&self, grad: &[f32]) -> Result<Vec<f32>> {
        let values = self.call(
            "pull_back",
            |py| PyTuple::new(py, [to_bytes(py, grad)?]),
            |r| Ok(floats(r.downcast::<PyBytes>()?.as_bytes(), "model")),
        )?;
        values.map_err(|e| rdml::input_error(e.to_string()))
    }

    fn differentiable(&self) -> bool {
        self.differentiable
    }
}

/// The error of a call: the exception the caller's model raised, as itself, when that is what
/// stopped it; a library error as [`invalid_or_raise`] says.
pub fn kept_or(raised: &Mutex<Option<PyErr>>, e: anyhow::Error) -> PyErr {
    let kept = raised.lock().unwrap_or_else(|p| p.into_inner()).take();
    match kept {
        Some(err) if e.chain().any(|c| c.to_string() == PY_RAISED) => err,
        _ => invalid_or_raise(e),
    }
}
