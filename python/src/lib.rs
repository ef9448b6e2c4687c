//! `rdml._rdml`: the library calls the `rdml` command makes, for the Python package (whose
//! `rdml/__init__.py` turns NumPy arrays into bytes and JSON into dicts, and nothing else).
//! Long calls release the GIL. Errors become `ValueError` (bad input: a config, a spec, a
//! shape), `FileNotFoundError` (a missing folder or file) or `RuntimeError`, with the CLI's
//! messages.

use anyhow::{Context as _, Result};
use pyo3::exceptions::{PyFileNotFoundError, PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use rdml::eval::knn::Embeddings;
use rdml::scoring::options::ScoringOptions;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A library error as the Python exception a user expects, with rdml's message.
fn raise(e: anyhow::Error) -> PyErr {
    let msg = python_words(&e);
    if e.chain().any(|c| c.to_string() == rdml::progress::INTERRUPTED) {
        return PyKeyboardInterrupt::new_err(msg);
    }
    let missing = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    });
    if missing {
        PyFileNotFoundError::new_err(msg)
    } else {
        // A device out of memory: the command line's advice, not cubecl's skipped kernels.
        let said = rdml::device::out_of_memory_report(&msg).unwrap_or(msg);
        PyRuntimeError::new_err(rdml::field::render(&said, rdml::field::Words::Python))
    }
}

/// An error in what the caller passed (a config, a spec, a shape).
fn invalid(e: anyhow::Error) -> PyErr {
    PyValueError::new_err(python_words(&e))
}

/// The library's message, its options named as keywords (`overwrite=True`, not `--overwrite`).
fn python_words(e: &anyhow::Error) -> String {
    rdml::field::render(&format!("{e:#}"), rdml::field::Words::Python)
}

/// `dir` as a run folder that exists (FileNotFoundError) and is a finished run (ValueError).
fn run_dir(dir: &str) -> PyResult<PathBuf> {
    let p = PathBuf::from(dir);
    if !p.is_dir() {
        return Err(PyFileNotFoundError::new_err(format!("{dir}: no such folder")));
    }
    rdml::run_dir::check_finished(&p).map_err(invalid)?;
    Ok(p)
}

fn device(flag: Option<&str>) -> PyResult<burn::tensor::Device> {
    Ok(rdml::device::open(flag, &[]).map_err(invalid)?.device)
}

/// Little-endian f32 bytes as values.
fn floats(bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
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
fn to_bytes<'py>(py: Python<'py>, v: &[f32]) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, v.len() * 4, |buf| {
        for (out, x) in buf.chunks_exact_mut(4).zip(v) {
            out.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    })
}

/// Rows scaled to unit length (cosine ranking = Euclidean ranking on the unit sphere).
fn unit_rows(v: &mut [f32], dim: usize) {
    for row in v.chunks_exact_mut(dim.max(1)) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        if n > 0.0 {
            row.iter_mut().for_each(|x| *x /= n);
        }
    }
}

/// `eval --json`'s metrics of query embeddings `[n, dim]` (float32 bytes) with labels, each
/// query against the others or against a gallery; `cosine` ranks by cosine similarity.
#[pyfunction]
#[pyo3(signature = (query, n, dim, labels, gallery, gallery_n, gallery_labels, recall_ks, cosine, nmi, pi_ratio, seed))]
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
    cosine: bool,
    nmi: bool,
    pi_ratio: bool,
    seed: u64,
) -> PyResult<String> {
    let mut q = floats(query, "embeddings")?;
    let mut g = gallery.map(|b| floats(b, "gallery")).transpose()?;
    if cosine {
        unit_rows(&mut q, dim);
        if let Some(g) = g.as_mut() {
            unit_rows(g, dim);
        }
    }
    // Labels of any integers: dense ids, equal where the given labels are equal.
    let mut ids = std::collections::HashMap::new();
    let mut dense = |v: &[i64]| -> Vec<u32> {
        v.iter()
            .map(|l| {
                let next = ids.len() as u32;
                *ids.entry(*l).or_insert(next)
            })
            .collect()
    };
    let ql = dense(&labels);
    let gl = gallery_labels.as_deref().map(&mut dense);
    let cfg = rdml::eval::EvalConfig {
        recall_ks,
        nmi,
        pi_ratio,
        ..Default::default()
    };
    cfg.validate().map_err(invalid)?;
    let q = Embeddings::new(q, n, dim).map_err(invalid)?;
    let g = match (g, gl) {
        (Some(g), Some(l)) => Some((Embeddings::new(g, gallery_n, dim).map_err(invalid)?, l)),
        _ => None,
    };
    let m = py.allow_threads(|| {
        let dev = rdml::default_device();
        let gallery = g.as_ref().map(|(e, l)| (e, l.as_slice()));
        rdml::eval::score_given(&q, &ql, gallery, &cfg, seed, &dev)
    });
    let m = m.map_err(invalid)?;
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
    py.allow_threads(rdml::device::list).map_err(raise)
}

/// `rdml train`: trains `config` (a preset name or a TOML file) into `out` and writes its
/// report.
#[pyfunction]
#[pyo3(signature = (config, out, set, epochs, max_batches, defense, resume, overwrite, device, data, quiet))]
#[allow(clippy::too_many_arguments)]
fn train(
    py: Python<'_>,
    config: &str,
    out: &str,
    set: Vec<String>,
    epochs: Option<usize>,
    max_batches: Option<usize>,
    defense: Option<String>,
    resume: bool,
    overwrite: bool,
    device: Option<String>,
    data: Option<String>,
    quiet: bool,
) -> PyResult<()> {
    let job = rdml::job::TrainJob {
        config: config.to_string(),
        set,
        epochs,
        max_batches,
        defense,
        data: data.map(PathBuf::from),
        out: out.into(),
        resume,
        overwrite,
        progress: !quiet,
    };
    let exp = job.experiment().map_err(invalid)?;
    let dev = rdml::device::open(device.as_deref(), &[exp.train.device])
        .map_err(invalid)?
        .device;
    py.allow_threads(|| job.run(&exp, &dev).map(|_| ())).map_err(raise)
}

/// A finished run's `run.json` (its resolved config, epochs and final metrics) as JSON.
#[pyfunction]
fn run_info(dir: &str) -> PyResult<String> {
    let p = run_dir(dir)?;
    std::fs::read_to_string(p.join(rdml::run_dir::RUN))
        .with_context(|| format!("cannot read {dir}/run.json"))
        .map_err(raise)
}

/// Embeddings of images `[n, c, h, w]` (float32 bytes in [0, 1]) by the run's model, in
/// batches of `batch`: `(bytes of [n, d], d)`.
#[pyfunction]
#[pyo3(signature = (dir, images, shape, batch, device))]
fn embed<'py>(
    py: Python<'py>,
    dir: &str,
    images: &[u8],
    shape: (usize, usize, usize, usize),
    batch: usize,
    device: Option<String>,
) -> PyResult<(Bound<'py, PyBytes>, usize)> {
    let p = run_dir(dir)?;
    let (n, c, h, w) = shape;
    let x = floats(images, "images")?;
    if x.len() != n * c * h * w || batch == 0 {
        return Err(PyValueError::new_err(format!(
            "images: {} values for shape {shape:?} (batch {batch})",
            x.len()
        )));
    }
    let dev = self::device(device.as_deref())?;
    // A model is built for its input's shape: weights that do not fit mean images of another
    // shape than the run's data.
    let (exp, net) = rdml::train::load_model(&p, [c, h, w], &dev).map_err(|e| {
        PyValueError::new_err(format!(
            "images of shape {c}×{h}×{w} (C×H×W) do not fit the model of {dir}, trained on images of its data set ({e:#})"
        ))
    })?;
    let dim = exp.model.embedding_dim;
    let oracle = rdml::attack::oracle::Net::new(&net, 0);
    let out = py
        .allow_threads(|| -> Result<Vec<f32>> {
            let per = c * h * w;
            let mut out = vec![];
            for start in (0..n).step_by(batch) {
                let m = batch.min(n - start);
                let data = burn::tensor::TensorData::new(x[start * per..(start + m) * per].to_vec(), [m, c, h, w]);
                let t = burn::tensor::Tensor::<4>::from_data(data, &dev);
                out.extend(rdml::attack::context::embed_tensor(&oracle, t)?);
            }
            Ok(out)
        })
        .map_err(raise)?;
    Ok((to_bytes(py, &out)?, dim))
}

/// `rdml embed`: the embeddings of a split, clean or (with `attack`) of its attacked test items:
/// `(bytes of [n, d], d, labels, ids, split codes)`.
#[pyfunction]
#[pyo3(signature = (dir, split, attack, options, data, device, quiet))]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn embed_split<'py>(
    py: Python<'py>,
    dir: &str,
    split: &str,
    attack: Option<String>,
    options: Options,
    data: Option<String>,
    device: Option<String>,
    quiet: bool,
) -> PyResult<(Bound<'py, PyBytes>, usize, Vec<u32>, Vec<u64>, Vec<u8>)> {
    let job = rdml::job::EmbedJob {
        model: run_dir(dir)?,
        data: data.map(PathBuf::from),
        split: split.parse().map_err(invalid)?,
        attack,
        options: options.into(),
        out: None,
        overwrite: false,
        progress: !quiet,
    };
    let e = py
        .allow_threads(|| job.run(|| open_device(device.as_deref())))
        .map_err(invalid_or_raise)?
        .exported;
    Ok((to_bytes(py, &e.embeddings)?, e.dim, e.labels, e.ids, e.split))
}

/// The scoring keywords, as `rdml/__init__.py` passes them: one dict, read into the library's
/// options (`queries=None`: the library's default).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Options {
    profile: String,
    eps: Option<f32>,
    step: Option<f32>,
    steps: Option<usize>,
    norm: Option<String>,
    random_start: bool,
    method: String,
    queries: Option<usize>,
    batch: usize,
    seed: u64,
    robrank_compat: bool,
}

impl From<Options> for ScoringOptions {
    fn from(o: Options) -> Self {
        let d = ScoringOptions::default();
        ScoringOptions {
            profile: o.profile,
            eps: o.eps,
            step: o.step,
            steps: o.steps,
            norm: o.norm,
            random_start: o.random_start,
            method: o.method,
            queries: o.queries.unwrap_or(d.queries),
            batch: o.batch,
            seed: o.seed,
            robrank_compat: o.robrank_compat,
        }
    }
}

/// The device a job opens once its request is checked.
fn open_device(flag: Option<&str>) -> Result<burn::tensor::Device> {
    Ok(rdml::device::open(flag, &[])
        .map_err(|e| rdml::input_error(format!("{e:#}")))?
        .device)
}

/// `rdml attack --json`: one attack's result (with `repeats > 1`, every run and each score's
/// mean and sample std).
#[pyfunction]
#[pyo3(signature = (dir, spec, options, surrogate, repeats, bn_set, data, device, quiet))]
#[allow(clippy::too_many_arguments)]
fn attack(
    py: Python<'_>,
    dir: &str,
    spec: &str,
    options: Options,
    surrogate: Option<String>,
    repeats: usize,
    bn_set: usize,
    data: Option<String>,
    device: Option<String>,
    quiet: bool,
) -> PyResult<String> {
    let job = rdml::job::AttackJob {
        model: run_dir(dir)?,
        attack: spec.to_string(),
        options: options.into(),
        run: run_scoring(data, surrogate, repeats, bn_set, quiet),
        save_examples: None,
    };
    let done = py
        .allow_threads(|| job.run(|| open_device(device.as_deref())))
        .map_err(invalid_or_raise)?;
    Ok(done.json().map_err(raise)?.to_string())
}

fn run_scoring(
    data: Option<String>,
    surrogate: Option<String>,
    repeats: usize,
    bn_set: usize,
    quiet: bool,
) -> rdml::scoring::options::RunScoring {
    rdml::scoring::options::RunScoring {
        data: data.map(PathBuf::from),
        surrogate: surrogate.map(PathBuf::from),
        repeats,
        bn_set,
        progress: !quiet,
        words: rdml::field::Words::Python,
    }
}

/// `rdml robustness`: robrank's ERS suite on the run, its record stored in the run folder (and
/// the report refreshed); the record as JSON.
#[pyfunction]
#[pyo3(signature = (dir, options, surrogate, repeats, data, device, quiet))]
#[allow(clippy::too_many_arguments)]
fn robustness(
    py: Python<'_>,
    dir: &str,
    options: Options,
    surrogate: Option<String>,
    repeats: usize,
    data: Option<String>,
    device: Option<String>,
    quiet: bool,
) -> PyResult<String> {
    let job = rdml::job::RobustnessJob {
        model: run_dir(dir)?,
        options: options.into(),
        run: run_scoring(data, surrogate, repeats, 0, quiet),
        out: None,
        overwrite: false,
    };
    let done = py
        .allow_threads(|| job.run(|| open_device(device.as_deref())))
        .map_err(invalid_or_raise)?;
    serde_json::to_string(&done.scored.record).map_err(|e| raise(e.into()))
}

/// `rdml report`: writes the run's report.html (computing its retrieval grid when missing);
/// returns its path.
/// `rdml import` (see `rdml.import_torch`): returns `import.json`'s record as JSON.
#[pyfunction]
#[pyo3(signature = (path, out, arch, embedder, embedding_dim, key_map, allow_unused, allow_missing, l2_normalize, input_norm, config, set, overwrite))]
#[allow(clippy::too_many_arguments)]
fn import_torch(
    py: Python<'_>,
    path: &str,
    out: &str,
    arch: &str,
    embedder: Option<String>,
    embedding_dim: Option<usize>,
    key_map: Vec<String>,
    allow_unused: bool,
    allow_missing: bool,
    l2_normalize: bool,
    input_norm: Option<String>,
    config: Option<String>,
    set: Vec<String>,
    overwrite: bool,
) -> PyResult<String> {
    for f in std::iter::once(path).chain(embedder.as_deref()) {
        if !Path::new(f).is_file() {
            return Err(PyFileNotFoundError::new_err(format!("{f}: no such checkpoint file")));
        }
    }
    let req = rdml::import::ImportRequest {
        from: path.into(),
        embedder: embedder.map(PathBuf::from),
        arch: arch.parse().map_err(invalid)?,
        embedding_dim,
        key_map,
        allow: rdml::model::import::Allow {
            unused: allow_unused,
            missing: allow_missing,
        },
        l2_normalize: Some(l2_normalize),
        input_norm,
        config,
        set,
        out: out.into(),
        overwrite,
    };
    let record = py.allow_threads(|| rdml::import::import(&req)).map_err(invalid)?;
    serde_json::to_string(&record).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

#[pyfunction]
#[pyo3(signature = (dir, data, grid, device))]
fn report(py: Python<'_>, dir: &str, data: Option<String>, grid: usize, device: Option<String>) -> PyResult<String> {
    let p = PathBuf::from(dir);
    if !p.is_dir() {
        return Err(PyFileNotFoundError::new_err(format!("{dir}: no such folder")));
    }
    let dev = self::device(device.as_deref())?;
    let opts = rdml::html::ReportOptions {
        data: data.map(PathBuf::from),
        grid_queries: grid,
        ..Default::default()
    };
    let path = py
        .allow_threads(|| rdml::html::refresh(&p, &opts, &dev))
        .map_err(raise)?;
    Ok(path.display().to_string())
}

/// A Python object standing for the caller's model (`rdml/_torch.py`'s `TorchModel`): `embed(images:
/// bytes, shape, keep) -> bytes` and `pull_back(grad: bytes) -> bytes`, float32 throughout. An
/// exception it raises (the user's model's own, a Ctrl-C) is kept and raised again as itself
/// when the library call returns.
struct PyModel {
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
fn with_model<T: Send>(
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
struct Caller(Option<Py<PyAny>>, Option<String>, bool);

impl Caller {
    fn into_model(self, raised: &Arc<Mutex<Option<PyErr>>>, what: &str) -> PyResult<rdml::model_scoring::Model> {
        Ok(match self {
            Caller(_, Some(dir), _) => rdml::model_scoring::Model::Run(run_dir(&dir)?),
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
fn surrogate(model: Option<Py<PyAny>>, run: Option<String>) -> Option<Caller> {
    (model.is_some() || run.is_some()).then_some(Caller(model, run, true))
}

/// A request's own checks (what the caller passed) as `ValueError`, other failures as [`raise`].
fn invalid_or_raise(e: anyhow::Error) -> PyErr {
    if e.chain().any(|c| c.is::<rdml::InputError>()) {
        invalid(e)
    } else {
        raise(e)
    }
}

/// The keywords of `rdml.robustness(model, …)` and `rdml.attack(model, …)` as the library's request.
fn model_scoring(
    options: ScoringOptions,
    repeats: usize,
    out: Option<String>,
    quiet: bool,
) -> rdml::model_scoring::ModelScoring {
    rdml::model_scoring::ModelScoring {
        options,
        repeats,
        gallery: None,
        out: out.map(PathBuf::from),
        progress: !quiet,
    }
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
    options: Options,
    repeats: usize,
    out: Option<String>,
    quiet: bool,
) -> PyResult<String> {
    let mut req = model_scoring(options.into(), repeats, out, quiet);
    let images = rdml::model_scoring::Images {
        images: floats(images, "images")?,
        shape,
        labels,
    };
    req.gallery = match gallery {
        Some((g, shape, labels)) => Some(rdml::model_scoring::Images {
            images: floats(&g, "gallery")?,
            shape,
            labels,
        }),
        None => None,
    };
    let dev = self::device(device.as_deref())?;
    let sur = surrogate(surrogate_model, surrogate_run);
    let v = with_model(py, Caller(model, run, differentiable), sur, |m, s| match &spec {
        None => Ok(serde_json::to_value(req.robustness(m, s, images, &dev)?.record)?),
        Some(spec) => rdml::model_scoring::attack_json(&req.attack(spec, m, s, images, &dev)?),
    })?;
    Ok(v.to_string())
}

/// `rdml.embed(model, images)`: `(bytes of [n, d], d)`.
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
    let dev = self::device(device.as_deref())?;
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
    m.add_function(wrap_pyfunction!(embed, m)?)?;
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
