//! The jobs for a front end that passes its requests as JSON (the Python package): a job's name,
//! its request under the library's field names, the float32 arrays it carries, and the caller's
//! own models when it scores one held outside rdml. The answer is JSON and arrays. Reading the
//! request, its defaults, opening the device and wording warnings happen here, so the front end
//! only moves bytes and raises errors as its exceptions.

use crate::attack::oracle::HostModel;
use crate::field::Words;
use crate::job::{AttackJob, EmbedJob, Labelled, MetricsJob, RobustnessJob, TrainJob};
use crate::scoring::model::ModelScoring;
use crate::scoring::options::ScoringOptions;
use anyhow::{Result, bail};
use burn::tensor::Device;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::path::PathBuf;

mod harden;
mod model;
pub mod session;
pub use session::{Session, SessionCall};

/// One job as the front end asks for it.
pub struct Call<'a> {
    /// `metrics`, `train`, `attack`, … (see [`call`]).
    pub job: &'a str,
    /// A JSON object with the request's field names; a field left out takes its default.
    pub request: &'a str,
    /// The float32 data the request describes, in the order its job reads them.
    pub arrays: Vec<Vec<f32>>,
    /// The caller's model and surrogate, when they are held outside rdml (`score`, `embed_model`).
    pub model: Option<Box<dyn HostModel>>,
    pub surrogate: Option<Box<dyn HostModel>>,
    /// The device option as the caller gave it.
    pub device: Option<&'a str>,
    /// How warnings name the options.
    pub words: Words,
    /// The ranks a scoring job is split over (`score_model`, `certify_model`, `embed_model`).
    pub ranks: crate::ranks::Ranks,
}

/// A job's answer: JSON text (as the library writes it: an f32 keeps its short form), and
/// float32 arrays when it computes embeddings.
#[derive(Debug, Default)]
pub struct Answer {
    pub json: String,
    pub arrays: Vec<Vec<f32>>,
}

impl Answer {
    fn of(v: &impl serde::Serialize) -> Result<Self> {
        Ok(Self {
            json: serde_json::to_string(v)?,
            arrays: vec![],
        })
    }
}

/// Runs the job `c` names; on ranks, a scoring job split over them ([`split`]).
pub fn call(c: Call) -> Result<Answer> {
    if c.ranks.split() {
        return split(c);
    }
    dispatch(c)
}

/// The job `c` names, on `c.ranks`.
fn dispatch(mut c: Call) -> Result<Answer> {
    let device = c.device;
    let open = move || open_device(device, &[]);
    Ok(match c.job {
        "metrics" => metrics(read(c.request)?, std::mem::take(&mut c.arrays))?,
        "presets" => Answer::of(&crate::config::PRESETS)?,
        "devices" => {
            let lines = crate::device::list()?;
            Answer::of(
                &lines
                    .iter()
                    .map(|l| crate::field::render(l, c.words))
                    .collect::<Vec<_>>(),
            )?
        }
        "defaults" => Answer::of(&defaults())?,
        "train" => {
            let job: TrainJob = read(c.request)?;
            job.run_on(|exp| open_device(device, &[exp.train.device]))?;
            Answer::of(&())?
        }
        // The file's own text: the caller reads its numbers as they were written.
        "run_info" => Answer {
            json: crate::run_dir::finished_run_json(&read::<Folder>(c.request)?.dir)?,
            arrays: vec![],
        },
        "embed_split" => {
            let e = read::<EmbedJob>(c.request)?.run(open)?.exported;
            Answer {
                arrays: vec![e.embeddings],
                ..Answer::of(&json!({"dim": e.dim, "labels": e.labels, "ids": e.ids}))?
            }
        }
        "attack" => {
            let mut job: AttackJob = read(c.request)?;
            job.run.ranks = c.ranks.clone();
            Answer::of(&job.run(open)?.json()?)?
        }
        "robustness" => {
            let mut job: RobustnessJob = read(c.request)?;
            job.run.ranks = c.ranks.clone();
            Answer::of(&job.run(open)?.scored.record)?
        }
        "import" => Answer::of(&crate::import::import(&read(c.request)?).map_err(the_callers)?)?,
        "report" => {
            let r: Report = read(c.request)?;
            let opts = crate::html::ReportOptions {
                data: r.data,
                grid_queries: r.grid,
                ..Default::default()
            };
            Answer::of(&crate::html::refresh(&r.dir, &opts, &open()?)?.display().to_string())?
        }
        "score_model" => model::score(read(c.request)?, c, open)?,
        "certify_model" => model::certify(read(c.request)?, c, open)?,
        "certify" => {
            let mut job: crate::job::CertifyJob = read(c.request)?;
            job.ranks = c.ranks.clone();
            Answer::of(&job.run(open)?.record)?
        }
        "trainer_step" => harden::trainer_step(read(c.request)?, c.arrays, open)?,
        "preset_tables" => harden::preset_tables(&read::<harden::Preset>(c.request)?.name)?,
        "embed_model" => model::embed_model(read(c.request)?, c, open)?,
        other => bail!("no job named {other:?}"),
    })
}

/// The jobs whose work is split over ranks.
const SPLIT: [&str; 6] = [
    "score_model",
    "certify_model",
    "embed_model",
    "robustness",
    "attack",
    "certify",
];

/// A scoring job on every rank of a process group: the ranks' requests compared first (the
/// request, its arrays' digests, the caller's model digests under `ranks` and the run folders'
/// weights), the work split, every rank answering the same. A request this rank cannot read is
/// told to the others, as a failure in the work is.
fn split(c: Call) -> Result<Answer> {
    let (text, asked) = match asked(&c) {
        Ok(p) => p,
        Err(e) => {
            c.ranks.tell_failure(&e);
            return Err(e);
        }
    };
    let ranks = c.ranks.clone();
    ranks.run(&asked, || dispatch(Call { request: &text, ..c }))
}

/// The request as the job reads it (the comparison's fields taken out), and what the ranks
/// compare.
fn asked(c: &Call) -> Result<(String, Value)> {
    crate::ensure_input!(
        SPLIT.contains(&c.job),
        "group: {} is not split over ranks; call it on one rank (or without a group)",
        c.job
    );
    let mut request: Value =
        serde_json::from_str(c.request).map_err(|e| crate::input_error(format!("request: {e}")))?;
    let obj = request
        .as_object_mut()
        .ok_or_else(|| crate::input_error("request: expected an object"))?;
    crate::ensure_input!(
        obj.get("adversarial").is_none_or(|v| v == &json!(false)),
        "group: an attack that returns its images runs on one rank (rdml.Attack takes no group)"
    );
    // Fields for the comparison alone: the caller's digests of its model.
    let digests = obj.remove("ranks").unwrap_or_else(|| json!({}));
    let text = serde_json::to_string(&request)?;
    let mut asked = json!({"job": c.job});
    let f = asked.as_object_mut().ok_or_else(|| anyhow::anyhow!("an object"))?;
    f.extend(without_progress(request).as_object().cloned().unwrap_or_default());
    f.extend(digests.as_object().cloned().unwrap_or_default());
    for (name, a) in ["images_digest", "gallery_digest"].iter().zip(&c.arrays) {
        f.insert(name.to_string(), json!(crate::ranks::digest(a)));
    }
    // Run folders' weights, read by each rank (a copy of its own on another machine).
    let path = |v: Option<&Value>| v.and_then(Value::as_str).map(PathBuf::from);
    let runs = [
        ("model_digest", path(f.get("model")).or(path(f.get("model_run")))),
        (
            "surrogate_digest",
            path(f.get("surrogate_run")).or(path(f.get("run").and_then(|r| r.get("surrogate")))),
        ),
    ];
    for (name, dir) in runs {
        if let Some(dir) = dir.filter(|d| d.is_dir()) {
            let digest =
                crate::run_dir::model_digest(&dir).map_err(|e| e.context(format!("the run {}", dir.display())))?;
            f.insert(name.to_string(), json!(digest));
        }
    }
    Ok((text, asked))
}

/// `v` without its `progress` fields (each rank shows its own progress or none; the work is
/// rank 0's to show either way).
fn without_progress(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| k != "progress")
                .map(|(k, v)| (k, without_progress(v)))
                .collect(),
        ),
        v => v,
    }
}

/// The device the caller named, else the one the configs name (a wrong name is the caller's).
fn open_device(flag: Option<&str>, named: &[Option<crate::device::DeviceChoice>]) -> Result<Device> {
    Ok(crate::device::open(flag, named)
        .map_err(|e| crate::input_error(format!("{e:#}")))?
        .device)
}

/// A request from JSON; what does not read is the caller's, named by its field (serde's
/// position left out: the caller wrote no text).
fn read<T: DeserializeOwned>(json: &str) -> Result<T> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(json)).map_err(|e| {
        let msg = e.inner().to_string();
        let said = crate::field::plain_serde(msg.rsplit_once(" at line ").map_or(msg.as_str(), |(m, _)| m));
        let said = said.as_str();
        match e.path().to_string().as_str() {
            "." => crate::input_error(said),
            field => crate::input_error(crate::field::in_keys(field, said)),
        }
    })
}

/// An error of a job whose every failure comes from what the caller passed (a file that is not
/// there stays that error).
fn the_callers(e: anyhow::Error) -> anyhow::Error {
    if crate::is_not_found(&e) || e.chain().any(|c| c.is::<crate::InputError>()) {
        e
    } else {
        crate::input_error(format!("{e:#}"))
    }
}

/// The defaults a front end's keywords must show (its test compares them).
fn defaults() -> Value {
    let (o, d) = (ScoringOptions::default(), ModelScoring::default());
    json!({
        "profile": o.profile.name(), "method": o.method, "batch": o.batch, "seed": o.seed, "repeats": d.repeats,
        "queries": o.queries, "grid": crate::html::GRID_QUERIES,
        "certify": certify_defaults(),
    })
}

/// `rdml certify`'s defaults, under the keywords' names.
fn certify_defaults() -> Value {
    let c = crate::certify::options::CertifyOptions::default();
    json!({
        "method": crate::certify::options::defaults::METHOD, "delta": c.delta,
        "sigma": c.sigma, "radii": c.radii, "samples": c.samples, "select": c.select, "alpha": c.alpha,
        "queries": c.queries, "batch": c.batch, "seed": c.seed, "per_query": c.per_query,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Folder {
    dir: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Report {
    dir: PathBuf,
    #[serde(default)]
    data: Option<PathBuf>,
    #[serde(default = "grid")]
    grid: usize,
}

fn grid() -> usize {
    crate::html::GRID_QUERIES
}

/// `metrics`: the arrays are the queries, then the gallery when `gallery_labels` is given, a
/// row for each label.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metrics {
    dim: usize,
    labels: Vec<i64>,
    #[serde(default)]
    gallery_labels: Option<Vec<i64>>,
    #[serde(default)]
    recall_ks: Option<Vec<usize>>,
    #[serde(default)]
    distance: crate::job::metrics::MetricDistance,
    #[serde(default = "crate::field::yes")]
    nmi: bool,
    #[serde(default = "crate::field::yes")]
    pi_ratio: bool,
    #[serde(default)]
    seed: u64,
}

fn metrics(r: Metrics, arrays: Vec<Vec<f32>>) -> Result<Answer> {
    let mut arrays = arrays.into_iter();
    // A row for each label: the job checks the values against the rows and the width.
    let mut labelled = |labels: Vec<i64>| Labelled {
        values: arrays.next().unwrap_or_default(),
        n: labels.len(),
        labels,
    };
    let query = labelled(r.labels);
    let gallery = r.gallery_labels.map(&mut labelled);
    let mut eval = crate::eval::EvalConfig {
        nmi: r.nmi,
        pi_ratio: r.pi_ratio,
        ..Default::default()
    };
    if let Some(ks) = r.recall_ks {
        eval.recall_ks = ks;
    }
    let job = MetricsJob {
        query,
        dim: r.dim,
        gallery,
        distance: r.distance,
        eval,
        seed: r.seed,
    };
    Answer::of(&job.run(&crate::default_device()).map_err(the_callers)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: &str, request: &str, arrays: Vec<Vec<f32>>) -> Result<Value> {
        let a = call(Call {
            job,
            request,
            arrays,
            model: None,
            surrogate: None,
            device: None,
            words: Words::Python,
            ranks: Default::default(),
        })?;
        Ok(serde_json::from_str(&a.json)?)
    }

    fn refusal(job: &str, request: &str, arrays: Vec<Vec<f32>>) -> String {
        let e = run(job, request, arrays).unwrap_err();
        assert!(e.chain().any(|c| c.is::<crate::InputError>()), "{e:#}");
        format!("{e:#}")
    }

    /// Two pairs far apart: each item's nearest other is its pair, so recall@1 is 1 when the pairs
    /// share labels and 0 when every pair mixes two classes; against a gallery, the rows count.
    #[test]
    fn metrics_read_the_arrays_as_the_request_describes_them() {
        let points = vec![0.0, 0.0, 1.0, 0.0, 10.0, 0.0, 11.0, 0.0];
        let same = r#"{"dim": 2, "labels": [0, 0, 1, 1], "recall_ks": [1, 2], "nmi": false, "pi_ratio": false}"#;
        let a = run("metrics", same, vec![points.clone()]).unwrap();
        assert_eq!((a["recall@1"].as_f64(), a["queries"].as_u64()), (Some(1.0), Some(4)));
        let mixed = r#"{"dim": 2, "labels": [0, 1, 0, 1], "recall_ks": [1], "nmi": false, "pi_ratio": false}"#;
        assert_eq!(run("metrics", mixed, vec![points.clone()]).unwrap()["recall@1"], 0.0);
        let gallery =
            r#"{"dim": 2, "labels": [0], "gallery_labels": [0, 1], "recall_ks": [1], "nmi": false, "pi_ratio": false}"#;
        let a = run("metrics", gallery, vec![vec![9.0, 0.0], vec![0.5, 0.0, 10.0, 0.0]]).unwrap();
        assert_eq!((a["recall@1"].as_f64(), a["queries"].as_u64()), (Some(0.0), Some(1)));
        // A gallery of another width is said as that, whatever its length.
        let said = refusal("metrics", gallery, vec![vec![9.0, 0.0], vec![0.5, 0.0, 10.0]]);
        assert!(said.contains("gallery: 1 dimensions, the queries have 2"), "{said}");
    }

    /// A request's mistakes are the caller's, named by the field; an unknown job is the front
    /// end's own mistake.
    #[test]
    fn a_wrong_request_names_its_field() {
        let said = refusal("metrics", r#"{"dim": 2, "labels": [0], "recal_ks": [1]}"#, vec![]);
        assert!(said.contains("recal_ks") && !said.contains(" at line "), "{said}");
        let said = refusal("metrics", r#"{"dim": 2, "labels": [0, 1], "seed": -1}"#, vec![]);
        assert!(said.starts_with("seed: invalid value"), "{said}");
        let said = refusal(
            "attack",
            r#"{"model": "r", "attack": "CA+", "options": {"batch": "8"}}"#,
            vec![],
        );
        assert!(said.starts_with("options.batch: a value of the wrong kind"), "{said}");
        let said = refusal(
            "metrics",
            r#"{"dim": 2, "labels": [0, 1], "distance": "l1"}"#,
            vec![vec![0.0; 4]],
        );
        assert!(
            said.starts_with("distance: l1 is not one of euclidean or cosine"),
            "{said}"
        );
        let attack = |options: &str| format!(r#"{{"model": "r", "attack": "CA+", "options": {options}}}"#);
        let said = refusal("attack", &attack(r#"{"profile": "rob99"}"#), vec![]);
        assert!(
            said.starts_with("options.profile: unknown profile 'rob99': expected rob28"),
            "{said}"
        );
        let said = refusal("attack", &attack(r#"{"norm": "l3"}"#), vec![]);
        assert!(said.starts_with("options.norm: l3 is not one of linf or l2"), "{said}");
        let said = refusal(
            "score_model",
            r#"{"images": {"shape": [1, 1, 2, 2]}}"#,
            vec![vec![0.0; 4]],
        );
        assert!(said.contains("model: missing"), "{said}");
        let e = run("attacks", "{}", vec![]).unwrap_err();
        assert!(!e.chain().any(|c| c.is::<crate::InputError>()) && format!("{e:#}").contains("attacks"));
    }

    /// What a front end lists and compares its keywords against is the library's own.
    #[test]
    fn defaults_and_presets_are_the_librarys() {
        let d = run("defaults", "{}", vec![]).unwrap();
        let o = ScoringOptions::default();
        assert_eq!(d["profile"], o.profile.name());
        assert_eq!(d["method"], o.method.as_str());
        assert_eq!(
            (d["queries"].as_u64(), d["batch"].as_u64()),
            (Some(o.queries as u64), Some(o.batch as u64))
        );
        assert_eq!(d["repeats"], crate::scoring::defaults::REPEATS);
        assert_eq!(d["grid"], crate::html::GRID_QUERIES);
        let p = run("presets", "{}", vec![]).unwrap();
        let names: Vec<_> = p.as_array().unwrap().iter().map(|e| e[0].as_str().unwrap()).collect();
        assert_eq!(
            names,
            crate::config::PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>()
        );
    }
}
