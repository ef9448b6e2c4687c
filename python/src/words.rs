//! How the library's answers cross into Python: its errors as the exceptions a Python user
//! expects (with the options named as keywords), and float32 data as bytes.

use pyo3::exceptions::{PyFileNotFoundError, PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A library error as its exception: an interrupt as `KeyboardInterrupt`, a file or folder that
/// is not there as `FileNotFoundError`, what the caller passed ([`rdml::InputError`]) as
/// `ValueError`, anything else as `RuntimeError`.
pub fn invalid_or_raise(e: anyhow::Error) -> PyErr {
    if e.chain().any(|c| c.is::<rdml::InputError>()) {
        invalid(e)
    } else {
        raise(e)
    }
}

/// [`invalid_or_raise`] without the input errors (every other failure is the machine's).
fn raise(e: anyhow::Error) -> PyErr {
    let msg = python_words(&e);
    if e.chain().any(|c| c.to_string() == rdml::progress::INTERRUPTED) {
        return PyKeyboardInterrupt::new_err(msg);
    }
    if rdml::is_not_found(&e) {
        PyFileNotFoundError::new_err(msg)
    } else {
        // A device out of memory: the command line's advice, not cubecl's skipped kernels.
        let said = rdml::device::out_of_memory_report(&msg).unwrap_or(msg);
        PyRuntimeError::new_err(rdml::field::render(&said, rdml::field::Words::Python))
    }
}

/// An error in what the caller passed (a config, a spec, a shape), unless it names a file or
/// folder that is not there.
fn invalid(e: anyhow::Error) -> PyErr {
    if rdml::is_not_found(&e) {
        PyFileNotFoundError::new_err(python_words(&e))
    } else {
        PyValueError::new_err(python_words(&e))
    }
}

/// The library's message, its options named as keywords (`overwrite=True`, not `--overwrite`).
fn python_words(e: &anyhow::Error) -> String {
    rdml::field::render(&format!("{e:#}"), rdml::field::Words::Python)
}

/// Little-endian f32 bytes as values.
pub fn floats(bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(PyValueError::new_err(format!("{what}: not float32 data")));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Values as little-endian f32 bytes, written straight into the new Python object (a model's
/// batch of 224² images is megabytes, crossed every attack step).
pub fn to_bytes<'py>(py: Python<'py>, v: &[f32]) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, v.len() * 4, |buf| {
        for (out, x) in buf.chunks_exact_mut(4).zip(v) {
            out.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    })
}

/// A build of the package with a cargo feature, as its user types it (`⟨+cuda⟩` in library text).
pub fn build_words(feature: &str) -> String {
    format!("`maturin develop --release --features {feature}` in python/")
}
