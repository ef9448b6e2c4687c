//! `rdml._rdml`: the library's jobs for the Python package (whose `rdml/__init__.py` turns NumPy
//! arrays into bytes and JSON into dicts, and nothing else). One function passes a job's request
//! to [`rdml::wire::call`], which reads it, fills the library's request and runs it, without
//! the GIL. Errors become the exceptions of [`words::invalid_or_raise`], with the library's
//! messages in keywords; an exception the caller's model raised is raised again as itself.

mod group;
mod model;
mod words;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rdml::field::Words;
use rdml::wire::{Call, call};
use std::sync::{Arc, Mutex};
use words::{floats, to_bytes};

pyo3::create_exception!(
    _rdml,
    RdmlWarning,
    pyo3::exceptions::PyUserWarning,
    "A warning or note of rdml's library: a result to read with care, or something rdml did on its own."
);

/// The library's warnings and notes of the job under way ([`rdml::notes`]), raised with
/// `warnings.warn` once it returns (it runs without the GIL, and may tell from any thread).
static TOLD: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Raises what the library told during the last job as `RdmlWarning`s, then `answer`.
fn told<T>(py: Python<'_>, answer: PyResult<T>) -> PyResult<T> {
    let texts = std::mem::take(&mut *TOLD.lock().unwrap_or_else(|p| p.into_inner()));
    let category = py.get_type::<RdmlWarning>();
    for text in texts {
        let text = std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default();
        let warned = PyErr::warn(py, &category, &text, 1);
        // The job's own error comes first; a warning made an error stops a job that succeeded.
        if answer.is_ok() {
            warned?;
        }
    }
    answer
}

/// The job `job` on its `request` (JSON, the library's field names) with its float32 `arrays`,
/// the caller's `model` and `surrogate` (objects with `embed`, `pull_back` and
/// `differentiable`), on `device`: `(the answer as JSON, its arrays as bytes)`.
/// `group` (a `TorchGroup`: `rank`, `size`, `all_gather`) splits a scoring job over its ranks,
/// each exchange waiting `timeout` seconds at most.
#[pyfunction]
#[pyo3(signature = (job, request, arrays, device, model, surrogate, group=None, timeout=None))]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn run<'py>(
    py: Python<'py>,
    job: &str,
    request: &str,
    arrays: Vec<Bound<'py, PyBytes>>,
    device: Option<String>,
    model: Option<Py<PyAny>>,
    surrogate: Option<Py<PyAny>>,
    group: Option<Py<PyAny>>,
    timeout: Option<f64>,
) -> PyResult<(String, Vec<Bound<'py, PyBytes>>)> {
    let arrays = arrays
        .iter()
        .map(|a| floats(a.as_bytes(), "arrays"))
        .collect::<PyResult<Vec<_>>>()?;
    let raised = Arc::new(Mutex::new(None));
    let held = |m: Option<Py<PyAny>>| m.map(|m| model::PyModel::boxed(py, m, &raised)).transpose();
    let ranks = match group {
        Some(g) => group::PyGroup::ranks(py, g, timeout, &raised)?,
        None => rdml::ranks::Ranks::alone(),
    };
    let c = Call {
        job,
        request,
        arrays,
        model: held(model)?,
        surrogate: held(surrogate)?,
        device: device.as_deref(),
        words: Words::Python,
        ranks,
    };
    let answer = told(py, py.allow_threads(|| call(c)).map_err(|e| model::kept_or(&raised, e)))?;
    let arrays = answer.arrays.iter().map(|a| to_bytes(py, a)).collect::<PyResult<_>>()?;
    Ok((answer.json, arrays))
}

/// A job that lives across the calls of the caller's own loop (`rdml.Defense`, `rdml.Loss`):
/// [`rdml::wire::Session`], one call at a time.
#[pyclass(module = "rdml._rdml")]
struct Session {
    inner: Mutex<rdml::wire::Session>,
    /// The thread inside a call (0: none), so that a call made again from inside one (the
    /// caller's model's forward running the same defense) is an error, not a wait on itself.
    busy: std::sync::atomic::AtomicU64,
    kind: String,
}

/// A number for the calling thread (never 0).
fn thread_number() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().id().hash(&mut h);
    h.finish() | 1
}

#[pymethods]
impl Session {
    /// The session `kind` (`defense`, `loss`) of `request` (JSON, the library's field names).
    #[new]
    #[pyo3(signature = (kind, request, device=None))]
    fn new(py: Python<'_>, kind: &str, request: &str, device: Option<String>) -> PyResult<Self> {
        let opened = rdml::wire::Session::open(kind, request, device.as_deref()).map_err(words::invalid_or_raise);
        let s = told(py, opened)?;
        Ok(Self {
            inner: Mutex::new(s),
            busy: std::sync::atomic::AtomicU64::new(0),
            kind: kind.to_string(),
        })
    }

    /// The session's `method` on `request` with float32 `arrays` and the caller's `models` (one
    /// per batch-norm set): `(the answer as JSON, its arrays as bytes)`.
    #[pyo3(signature = (method, request, arrays, models))]
    #[allow(clippy::type_complexity)]
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        request: &str,
        arrays: Vec<Bound<'py, PyBytes>>,
        models: Vec<Py<PyAny>>,
    ) -> PyResult<(String, Vec<Bound<'py, PyBytes>>)> {
        let arrays = arrays
            .iter()
            .map(|a| floats(a.as_bytes(), "arrays"))
            .collect::<PyResult<Vec<_>>>()?;
        let raised = Arc::new(Mutex::new(None));
        let models = models
            .into_iter()
            .map(|m| model::PyModel::boxed(py, m, &raised))
            .collect::<PyResult<Vec<_>>>()?;
        let c = rdml::wire::SessionCall {
            method,
            request,
            arrays,
            models,
        };
        use std::sync::atomic::Ordering;
        let me = thread_number();
        if self.busy.load(Ordering::SeqCst) == me {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{} {method}: called again from inside its own call on this thread (the model's forward, or a \
                 hook, runs the same rdml.{} while it asks the model); a defense or a loss takes one call at a \
                 time: call it from your training step, not from inside the model",
                self.kind,
                if self.kind == "loss" { "Loss" } else { "Defense" }
            )));
        }
        let answer = py
            .allow_threads(|| {
                let mut session = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                self.busy.store(me, Ordering::SeqCst);
                /// Clears `busy` however the call ends.
                struct Done<'a>(&'a std::sync::atomic::AtomicU64);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.store(0, Ordering::SeqCst);
                    }
                }
                let _done = Done(&self.busy);
                session.call(c)
            })
            .map_err(|e| model::kept_or(&raised, e));
        let answer = told(py, answer)?;
        let arrays = answer.arrays.iter().map(|a| to_bytes(py, a)).collect::<PyResult<_>>()?;
        Ok((answer.json, arrays))
    }
}

/// Tells the other ranks of `group` that this rank failed (`reason`) before its call reached the
/// library (its input refused in Python), so that they stop rather than wait.
#[pyfunction]
#[pyo3(signature = (group, reason, timeout=None))]
fn tell_failure(py: Python<'_>, group: Py<PyAny>, reason: &str, timeout: Option<f64>) -> PyResult<()> {
    let ranks = group::PyGroup::ranks(py, group, timeout, &Arc::new(Mutex::new(None)))?;
    let e = anyhow::anyhow!("{reason}");
    py.allow_threads(|| ranks.tell_failure(&e));
    Ok(())
}

/// PyTorch's thread count `n`, told before rdml's first CPU work; the library decides whether its
/// pool follows ([`rdml::device::cpu_threads_beside`]): whether it did.
#[pyfunction]
fn cpu_threads(n: usize) -> bool {
    rdml::device::cpu_threads_beside(n)
}

/// The threads of rdml's CPU pool.
#[pyfunction]
fn cpu_pool() -> usize {
    rdml::device::cpu_pool_size()
}

#[pymodule]
fn _rdml(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Ctrl-C between batches: Python's handler runs (and its KeyboardInterrupt is raised again
    // by `raise`) when a training or attack loop asks, with the GIL taken for that moment.
    rdml::progress::set_interrupt(Some(Box::new(|| Python::with_gil(|py| py.check_signals().is_err()))));
    rdml::field::set_build_words(words::build_words);
    rdml::notes::set_sink(Some(Box::new(|_, text| {
        let text = rdml::field::render(text, Words::Python);
        TOLD.lock().unwrap_or_else(|p| p.into_inner()).push(text);
    })));
    m.add("RdmlWarning", m.py().get_type::<RdmlWarning>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_threads, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_pool, m)?)?;
    m.add_function(wrap_pyfunction!(tell_failure, m)?)?;
    m.add_class::<Session>()?;
    Ok(())
}
