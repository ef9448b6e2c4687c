//! The caller's model as the library's oracle: a Python object (`rdml/_torch.py`'s
//! `TorchModel`) behind [`rdml::attack::oracle::HostModel`], or an rdml run by its folder.

use crate::words::{floats, invalid_or_raise, to_bytes};
use anyhow::Result;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A Python object standing for the caller's model (`rdml/_torch.py`'s `TorchModel`): `embed(images:
/// bytes, shape, keep) -> bytes` and `pull_back(grad: bytes) -> bytes`, float32 throughout. An
/// exception it raises (the user's model's own, a Ctrl-C) is kept and raised again as itself
/// when the library call returns.
pub struct PyModel {
    obj: Py<PyAny>,
    differentiable: bool,
    raised: Arc<Mutex<Option<PyErr>>>,
}

/// The library error that stands for a Python exception kept by [`PyModel`].
const PY_RAISED: &str = "the model raised an exception";

impl PyModel {
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
                *self.raised.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                anyhow::anyhow!(PY_RAISED)
            })
        })
    }
}

impl rdml::attack::oracle::HostModel for PyModel {
    fn embed(&self, images: &[f32], shape: [usize; 4], keep: bool) -> Result<rdml::attack::oracle::Embedded> {
        let (bytes, shape, has_gradient) = self.call(
            "embed",
            |py| {
                let s = PyTuple::new(py, shape)?;
                let k = keep.into_pyobject(py)?.to_owned();
                PyTuple::new(py, [to_bytes(py, images)?.into_any(), s.into_any(), k.into_any()])
            },
            |r| {
                let (b, shape, grad) = r.extract::<(Bound<'_, PyBytes>, Vec<usize>, bool)>()?;
                Ok((floats(b.as_bytes(), "model"), shape, grad))
            },
        )?;
        Ok(rdml::attack::oracle::Embedded {
            values: bytes.map_err(|e| rdml::input_error(e.to_string()))?,
            shape,
            has_gradient,
        })
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

/// Runs `job` on the caller's model without the GIL; an exception the model raised is raised
/// again as itself, a library error as [`raise`] says.
pub fn with_model<T: Send>(
    py: Python<'_>,
    model: Caller,
    surrogate: Option<Caller>,
    job: impl FnOnce(rdml::model_scoring::Model, Option<rdml::model_scoring::Model>) -> Result<T> + Send,
) -> PyResult<T> {
    let raised = Arc::new(Mutex::new(None));
    let m = model.into_model(&raised, "model")?;
    let s = surrogate.map(|c| c.into_model(&raised, "surrogate")).transpose()?;
    let out = py.allow_threads(|| job(m, s));
    out.map_err(|e| {
        let kept = raised.lock().unwrap_or_else(|p| p.into_inner()).take();
        match kept {
            Some(err) if e.chain().any(|c| c.to_string() == PY_RAISED) => err,
            _ => invalid_or_raise(e),
        }
    })
}

/// A model as the package passes it: a Python object (with its declared differentiability) or
/// an rdml run by its folder.
pub struct Caller(pub Option<Py<PyAny>>, pub Option<String>, pub bool);

impl Caller {
    fn into_model(self, raised: &Arc<Mutex<Option<PyErr>>>, what: &str) -> PyResult<rdml::model_scoring::Model> {
        Ok(match self {
            Caller(_, Some(dir), _) => rdml::model_scoring::Model::Run(PathBuf::from(dir)),
            Caller(Some(obj), None, differentiable) => rdml::model_scoring::Model::Outside(Box::new(PyModel {
                obj,
                differentiable,
                raised: raised.clone(),
            })),
            Caller(None, None, _) => return Err(PyValueError::new_err(format!("{what}: missing"))),
        })
    }
}

/// The surrogate of a transfer attack, when the package passed one.
pub fn surrogate(model: Option<Py<PyAny>>, run: Option<String>) -> Option<Caller> {
    (model.is_some() || run.is_some()).then_some(Caller(model, run, true))
}
