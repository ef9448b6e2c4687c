//! `rdml._rdml`: the library's jobs for the Python package (whose `rdml/__init__.py` turns NumPy
//! arrays into bytes and JSON into dicts, and nothing else). Each function fills one library
//! request and runs it; long calls release the GIL. Errors become the exceptions of
//! [`words::invalid_or_raise`], with the library's messages in keywords.

mod model;
mod words;

use model::{Caller, surrogate, with_model};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rdml::field::Words;
use rdml::scoring::options::ScoringOptions;
use std::path::PathBuf;
use words::{floats, invalid, invalid_or_raise, open_device, raise, to_bytes};

/// `eval --json`'s metrics of query embeddings `[n, dim]` (float32 bytes) with labels, each
/// query against the others or against a gallery; `cosine` ranks by cosine similarity.
#[pyfunction]
#[pyo3(signature = (query, n, dim, labels, gallery, gallery_n, gallery_labels, recall_ks, distance, nmi, pi_ratio, seed))]
#[allow(clippy::too_many_arguments)]
fn metrics(
    py: Python<'_>,
    query: &[u8],
    n: usize,
    dim: usize,
    labels: Vec<i64>,
    gallery: Option<&[u8]>,
    gallery_n: usize,
    gallery_labels: Option<Vec<i64>>,
    recall_ks: Vec<usize>,
    distance: String,
    nmi: bool,
    pi_ratio: bool,
    seed: u64,
) -> PyResult<String> {
    let gallery = match (gallery, gallery_labels) {
        (Some(g), Some(labels)) => Some(rdml::job::Labelled {
            values: floats(g, "gallery")?,
            n: gallery_n,
            labels,
        }),
        _ => None,
    };
    let job = rdml::job::MetricsJob {
        query: rdml::job::Labelled {
            values: floats(query, "embeddings")?,
            n,
            labels,
        },
        dim,
        gallery,
        distance,
        eval: rdml::eval::EvalConfig {
            recall_ks,
            nmi,
            pi_ratio,
            ..Default::default()
        },
        seed,
    };
    let m = py.allow_threads(|| job.run(&rdml::default_device())).map_err(invalid)?;
    serde_json::to_string(&m).map_err(|e| raise(e.into()))
}

/// Every preset: (name, TOML).
#[pyfunction]
fn presets() -> Vec<(String, String)> {
    rdml::config::PRESETS
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

/// What `rdml devices` lists.
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Vec<String>> {
    let lines = py.allow_threads(rdml::device::list).map_err(raise)?;
    Ok(lines.iter().map(|l| rdml::field::render(l, Words::Python)).collect())
}

/// `rdml train`: the library's `TrainJob` (JSON, its field names) trained into its `out`, and
/// its report written.
#[pyfunction]
#[pyo3(signature = (request, device))]
fn train(py: Python<'_>, request: &str, device: Option<String>) -> PyResult<()> {
    let mut job: rdml::job::TrainJob = read(request)?;
    job.words = Words::Python;
    let open = |exp: &rdml::config::Experiment| {
        rdml::device::open(device.as_deref(), &[exp.train.device])
            .map(|s| s.device)
            .map_err(|e| rdml::input_error(format!("{e:#}")))
    };
    py.allow_threads(|| job.run_on(open).map(|_| ()))
        .map_err(invalid_or_raise)
}

/// A finished run's `run.json` (its resolved config, epochs and final metrics) as JSON.
#[pyfunction]
fn run_info(dir: &str) -> PyResult<String> {
    rdml::run_dir::finished_run_json(dir.as_ref()).map_err(invalid_or_raise)
}

/// `rdml embed`: the library's `EmbedJob` (JSON): the embeddings of a split, clean or (with
/// `attack`) of its attacked test items: `(bytes of [n, d], d, labels, ids, split codes)`.
#[pyfunction]
#[pyo3(signature = (request, device))]
#[allow(clippy::type_complexity)]
fn embed_split<'py>(
    py: Python<'py>,
    request: &str,
    device: Option<String>,
) -> PyResult<(Bound<'py, PyBytes>, usize, Vec<u32>, Vec<u64>, Vec<u8>)> {
    let job: rdml::job::EmbedJob = read(request)?;
    let e = py
        .allow_threads(|| job.run(|| open_device(device.as_deref())))
        .map_err(invalid_or_raise)?
        .exported;
    Ok((to_bytes(py, &e.embeddings)?, e.dim, e.labels, e.ids, e.split))
}

/// A library request from the JSON the package wrote with its field names; what does not read
/// is the caller's (`ValueError`, serde's position left out).
fn read<T: serde::de::DeserializeOwned>(json: &str) -> PyResult<T> {
    serde_json::from_str(json).map_err(|e| {
        let msg = e.to_string();
        let said = msg.rsplit_once(" at line ").map_or(msg.as_str(), |(m, _)| m);
        pyo3::exceptions::PyValueError::new_err(said.to_string())
    })
}

/// `rdml attack --json`: the library's `AttackJob` (JSON): one attack's result (with
/// `repeats > 1`, every run and each score's mean and sample std).
#[pyfunction]
#[pyo3(signature = (request, device))]
fn attack(py: Python<'_>, request: &str, device: Option<String>) -> PyResult<String> {
    let mut job: rdml::job::AttackJob = read(request)?;
    job.run.words = Words::Python;
    let done = py
        .allow_threads(|| job.run(|| open_device(device.as_deref())))
        .map_err(invalid_or_raise)?;
    Ok(done.json().map_err(raise)?.to_string())
}

/// `rdml robustness`: the library's `RobustnessJob` (JSON): robrank's ERS suite on the run, its
/// record stored in the run folder (and the report refreshed); the record as JSON.
#[pyfunction]
#[pyo3(signature = (request, device))]
fn robustness(py: Python<'_>, request: &str, device: Option<String>) -> PyResult<String> {
    let mut job: rdml::job::RobustnessJob = read(request)?;
    job.run.words = Words::Python;
    let done = py
        .allow_threads(|| job.run(|| open_device(device.as_deref())))
        .map_err(invalid_or_raise)?;
    serde_json::to_string(&done.scored.record).map_err(|e| raise(e.into()))
}

/// `rdml import`: the library's `ImportRequest` (JSON); returns `import.json`'s record as JSON.
#[pyfunction]
#[pyo3(signature = (request))]
fn import_torch(py: Python<'_>, request: &str) -> PyResult<String> {
    let req: rdml::import::ImportRequest = read(request)?;
    let record = py.allow_threads(|| rdml::import::import(&req)).map_err(invalid)?;
    serde_json::to_string(&record).map_err(|e| raise(e.into()))
}

/// `rdml report`: writes the run's report.html (computing its retrieval grid when missing);
/// returns its path.
#[pyfunction]
#[pyo3(signature = (dir, data, grid, device))]
fn report(py: Python<'_>, dir: &str, data: Option<String>, grid: usize, device: Option<String>) -> PyResult<String> {
    let opts = rdml::html::ReportOptions {
        data: data.map(PathBuf::from),
        grid_queries: grid,
        ..Default::default()
    };
    let dir = PathBuf::from(dir);
    let path = py
        .allow_threads(|| rdml::html::refresh(&dir, &opts, &open_device(device.as_deref())?))
        .map_err(invalid_or_raise)?;
    Ok(path.display().to_string())
}

/// `rdml.robustness(model, images, labels, …)` (`spec` `None`: the ERS suite, its record) and
/// `rdml.attack(model, images, labels, spec, …)` (one attack's result), as JSON.
#[pyfunction]
#[pyo3(signature = (model, run, surrogate_model, surrogate_run, device, differentiable, images, shape, labels, gallery, spec, options, repeats, out, quiet))]
#[allow(clippy::too_many_arguments)]
fn score_model(
    py: Python<'_>,
    model: Option<Py<PyAny>>,
    run: Option<String>,
    surrogate_model: Option<Py<PyAny>>,
    surrogate_run: Option<String>,
    device: Option<String>,
    differentiable: bool,
    images: &[u8],
    shape: [usize; 4],
    labels: Vec<i64>,
    gallery: Option<(Vec<u8>, [usize; 4], Vec<i64>)>,
    spec: Option<String>,
    options: &str,
    repeats: usize,
    out: Option<String>,
    quiet: bool,
) -> PyResult<String> {
    let gallery = match gallery {
        Some((g, shape, labels)) => Some(rdml::model_scoring::Images {
            images: floats(&g, "gallery")?,
            shape,
            labels,
        }),
        None => None,
    };
    let req = rdml::model_scoring::ModelScoring {
        options: read(options)?,
        repeats,
        gallery,
        out: out.map(PathBuf::from),
        progress: !quiet,
    };
    let images = rdml::model_scoring::Images {
        images: floats(images, "images")?,
        shape,
        labels,
    };
    let dev = open_device(device.as_deref()).map_err(invalid)?;
    let sur = surrogate(surrogate_model, surrogate_run);
    let v = with_model(py, Caller(model, run, differentiable), sur, |m, s| match &spec {
        None => Ok(serde_json::to_value(req.robustness(m, s, images, &dev)?.record)?),
        Some(spec) => rdml::model_scoring::attack_json(&req.attack(spec, m, s, images, &dev)?),
    })?;
    Ok(v.to_string())
}

/// `rdml.embed(model, images)` and `Run.embed`: `(bytes of [n, d], d)`.
#[pyfunction]
#[pyo3(signature = (model, run, device, images, shape, batch))]
fn embed_model<'py>(
    py: Python<'py>,
    model: Option<Py<PyAny>>,
    run: Option<String>,
    device: Option<String>,
    images: &[u8],
    shape: [usize; 4],
    batch: usize,
) -> PyResult<(Bound<'py, PyBytes>, usize)> {
    let x = floats(images, "images")?;
    let dev = open_device(device.as_deref()).map_err(invalid)?;
    let e = with_model(py, Caller(model, run, true), None, |m, _| {
        rdml::model_scoring::embed(m, &x, shape, batch, &dev)
    })?;
    Ok((to_bytes(py, &e.data)?, e.dim))
}

/// The library's defaults of the keywords, for the package's test that its signatures say the
/// same: (profile, method, batch, seed, repeats, queries, report grid queries).
#[pyfunction]
fn defaults() -> (String, String, usize, u64, usize, usize, usize) {
    let (o, d) = (ScoringOptions::default(), rdml::model_scoring::ModelScoring::default());
    (
        o.profile,
        o.method,
        o.batch,
        o.seed,
        d.repeats,
        o.queries,
        rdml::html::GRID_QUERIES,
    )
}

#[pymodule]
fn _rdml(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Ctrl-C between batches: Python's handler runs (and its KeyboardInterrupt is raised again
    // by `raise`) when a training or attack loop asks, with the GIL taken for that moment.
    rdml::progress::set_interrupt(Some(Box::new(|| Python::with_gil(|py| py.check_signals().is_err()))));
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(metrics, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(run_info, m)?)?;
    m.add_function(wrap_pyfunction!(embed_split, m)?)?;
    m.add_function(wrap_pyfunction!(attack, m)?)?;
    m.add_function(wrap_pyfunction!(robustness, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(import_torch, m)?)?;
    m.add_function(wrap_pyfunction!(score_model, m)?)?;
    m.add_function(wrap_pyfunction!(embed_model, m)?)?;
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    Ok(())
}
