//! The caller's torch.distributed process group as the library's [`rdml::ranks::Group`]: a
//! Python object (`rdml/_ranks.py`'s `TorchGroup`) with `rank`, `size` and
//! `all_gather(bytes, timeout) -> list[bytes]`, torch's collectives on the backend's device.

use anyhow::Result;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct PyGroup {
    obj: Py<PyAny>,
    rank: usize,
    size: usize,
    /// The exception the call's models raised, if one did: the failure told to the others.
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl PyGroup {
    /// `obj`'s ranks, with `raised` the call's models' kept exception; `timeout` (seconds) how
    /// long the first exchange waits for the others (the library's default when `None`).
    pub fn ranks(
        py: Python<'_>,
        obj: Py<PyAny>,
        timeout: Option<f64>,
        raised: &Arc<Mutex<Option<PyErr>>>,
    ) -> PyResult<rdml::ranks::Ranks> {
        let rank = obj.bind(py).getattr("rank")?.extract()?;
        let size = obj.bind(py).getattr("size")?.extract()?;
        let g = PyGroup {
            obj,
            rank,
            size,
            raised: raised.clone(),
        };
        Ok(rdml::ranks::Ranks::over(Arc::new(g), timeout))
    }
}

impl rdml::ranks::Group for PyGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    /// An exception the collective raised (a timeout, a Ctrl-C, the group's own error) is kept
    /// and raised again as itself, as a model's is.
    fn all_gather(&self, bytes: &[u8], wait: Option<Duration>) -> Result<Vec<Vec<u8>>> {
        Python::with_gil(|py| {
            let got = self
                .obj
                .bind(py)
                .call_method1("all_gather", (PyBytes::new(py, bytes), wait.map(|w| w.as_secs_f64())))
                .and_then(|r| {
                    r.downcast::<PyList>()?
                        .iter()
                        .map(|m| Ok(m.downcast::<PyBytes>()?.as_bytes().to_vec()))
                        .collect::<PyResult<Vec<_>>>()
                });
            got.map_err(|e| {
                let mut kept = self.raised.lock().unwrap_or_else(|p| p.into_inner());
                if kept.is_none() {
                    *kept = Some(e);
                }
                anyhow::anyhow!(crate::model::PY_RAISED)
            })
        })
    }

    fn reason(&self, e: &anyhow::Error) -> String {
        let said = || rdml::field::render(&format!("{e:#}"), rdml::field::Words::Python);
        if !e.chain().any(|c| c.to_string() == crate::model::PY_RAISED) {
            return said();
        }
        // The GIL before the lock, in the order the model's calls take them.
        Python::with_gil(|py| {
            let kept = self.raised.lock().unwrap_or_else(|p| p.into_inner());
            match kept.as_ref() {
                Some(err) => format!(
                    "the model raised {}",
                    err.value(py).repr().map_or_else(|_| err.to_string(), |r| r.to_string())
                ),
                None => said(),
            }
        })
    }
}
