//! `rdml._rdml`: the library's jobs for the Python package (whose `rdml/__init__.py` turns NumPy
//! arrays into bytes and JSON into dicts, and nothing else). One function passes a job's request
//! to [`rdml::job::wire::call`], which reads it, fills the library's request and runs it, without
//! the GIL. Errors become the exceptions of [`words::invalid_or_raise`], with the library's
//! messages in keywords; an exception the caller's model raised is raised again as itself.

mod model;
mod words;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rdml::field::Words;
use rdml::job::wire::{Call, call};
use std::sync::{Arc, Mutex};
use words::{floats, to_bytes};

/// The job `job` on its `request` (JSON, the library's field names) with its float32 `arrays`,
/// the caller's `model` and `surrogate` (objects with `embed`, `pull_back` and
/// `differentiable`), on `device`: `(the answer as JSON, its arrays as bytes)`.
#[pyfunction]
#[pyo3(signature = (job, request, arrays, device, model, surrogate))]
#[allow(clippy::type_complexity)]
fn run<'py>(
    py: Python<'py>,
    job: &str,
    request: &str,
    arrays: Vec<Bound<'py, PyBytes>>,
    device: Option<String>,
    model: Option<Py<PyAny>>,
    surrogate: Option<Py<PyAny>>,
) -> PyResult<(String, Vec<Bound<'py, PyBytes>>)> {
    let arrays = arrays
        .iter()
        .map(|a| floats(a.as_bytes(), "arrays"))
        .collect::<PyResult<Vec<_>>>()?;
    let raised = Arc::new(Mutex::new(None));
    let held = |m: Option<Py<PyAny>>| m.map(|m| model::PyModel::boxed(py, m, &raised)).transpose();
    let c = Call {
        job,
        request,
        arrays,
        model: held(model)?,
        surrogate: held(surrogate)?,
        device: device.as_deref(),
        words: Words::Python,
    };
    let answer = py.allow_threads(|| call(c)).map_err(|e| model::kept_or(&raised, e))?;
    let arrays = answer.arrays.iter().map(|a| to_bytes(py, a)).collect::<PyResult<_>>()?;
    Ok((answer.json, arrays))
}

#[pymodule]
fn _rdml(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Ctrl-C between batches: Python's handler runs (and its KeyboardInterrupt is raised again
    // by `raise`) when a training or attack loop asks, with the GIL taken for that moment.
    rdml::progress::set_interrupt(Some(Box::new(|| Python::with_gil(|py| py.check_signals().is_err()))));
    rdml::field::set_build_words(words::build_words);
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    Ok(())
}
