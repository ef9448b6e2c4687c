//! The wire's sessions: a job that lives across calls of a caller's own training loop (a defense,
//! a loss), opened from its request and then asked, method by method, with JSON and float32
//! arrays as every wire job is. The front end holds the session and moves bytes; what each method
//! reads, checks and answers is here.

use super::{Answer, open_device, read};
use crate::attack::oracle::HostModel;
use crate::harden::leaves::Given;
use crate::harden::{DefenseRequest, DefenseSession, GivenTriplets, Images, LossRequest, LossSession, Saved, Stream};
use anyhow::Result;
use serde::Deserialize;
use serde_json::json;

/// One call of a session's method.
pub struct SessionCall<'a> {
    pub method: &'a str,
    /// A JSON object with the method's field names.
    pub request: &'a str,
    pub arrays: Vec<Vec<f32>>,
    /// The caller's model, one per batch-norm set where the defense generates through several.
    pub models: Vec<Box<dyn HostModel>>,
}

/// A defense or a loss between the steps of the caller's loop.
pub enum Session {
    Defense(Box<DefenseSession>),
    Loss(Box<LossSession>),
}

impl Session {
    /// A session of `kind` (`defense`, `loss`) from its request, its own computations on the
    /// device the caller named (rdml's default: the CPU).
    pub fn open(kind: &str, request: &str, device: Option<&str>) -> Result<Self> {
        let device = open_device(device, &[])?;
        Ok(match kind {
            "defense" => Session::Defense(Box::new(DefenseSession::open(
                read::<DefenseRequest>(request)?,
                &device,
            )?)),
            "loss" => Session::Loss(Box::new(LossSession::open(read::<LossRequest>(request)?, &device)?)),
            other => anyhow::bail!("no session named {other:?}"),
        })
    }

    /// Runs the method `c` names.
    pub fn call(&mut self, c: SessionCall) -> Result<Answer> {
        match self {
            Session::Defense(d) => defense(d, c),
            Session::Loss(l) => loss(l, c),
        }
    }
}

/// Images as a method's request describes them (their values: the call's first array).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    shape: [usize; 4],
    labels: Vec<i64>,
    #[serde(default)]
    indices: Option<Vec<usize>>,
    #[serde(default)]
    triplets: Option<crate::harden::GivenTriplets>,
}

/// A batch as `inner` and `perturb` read it: the request (its indices and triplets) and its images.
fn read_batch(request: &str, values: Option<Vec<f32>>) -> Result<(Batch, Images)> {
    let mut b: Batch = read(request)?;
    let images = Images {
        images: values.unwrap_or_default(),
        shape: b.shape,
        labels: std::mem::take(&mut b.labels),
    };
    Ok((b, images))
}

/// Embeddings as a method's request describes them: the rows of each array, in order.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Outer {
    rows: Vec<usize>,
    #[serde(default)]
    beta: Option<f32>,
    #[serde(default)]
    dtype: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EpochStart {
    epoch: usize,
    epochs: usize,
    #[serde(default)]
    training_set: Option<Batch>,
    #[serde(default = "batch")]
    batch: usize,
}

fn batch() -> usize {
    crate::scoring::defaults::BATCH
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Compute {
    labels: Vec<i64>,
    #[serde(default)]
    beta: Option<f32>,
    /// The embeddings' floating type as the caller computed them.
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    indices_tuple: Option<GivenTriplets>,
}

fn given(arrays: Vec<Vec<f32>>, rows: &[usize], dtype: Option<&str>) -> Result<Vec<Given>> {
    let significand = crate::harden::leaves::significand_bits(dtype)?;
    crate::ensure_input!(
        arrays.len() == rows.len(),
        "embeddings: {} arrays, {} row counts",
        arrays.len(),
        rows.len()
    );
    Ok(arrays
        .into_iter()
        .zip(rows)
        .map(|(values, &rows)| Given {
            values,
            rows,
            significand,
        })
        .collect())
}

fn defense(d: &mut DefenseSession, c: SessionCall) -> Result<Answer> {
    let mut arrays = c.arrays.into_iter();
    match c.method {
        "info" => Answer::of(&d.info()),
        "inner" => {
            let (b, images) = read_batch(c.request, arrays.next())?;
            let f = d.inner(images, b.indices, b.triplets, c.models)?;
            let forwards: Vec<_> = f
                .images
                .iter()
                .zip(&f.bn_sets)
                .map(|((_, shape), bn_set)| json!({"shape": shape, "bn_set": bn_set}))
                .collect();
            Ok(Answer {
                arrays: f.images.into_iter().map(|(v, _)| v).collect(),
                ..Answer::of(&json!({"forwards": forwards, "perturbed_rows": f.perturbed_rows, "route": f.route}))?
            })
        }
        "outer" => {
            let o: Outer = read(c.request)?;
            let mut s = d.outer(given(arrays.collect(), &o.rows, o.dtype.as_deref())?, o.beta)?;
            Ok(Answer {
                arrays: std::mem::take(&mut s.grads),
                ..Answer::of(&s)?
            })
        }
        "perturb" => {
            let (b, images) = read_batch(c.request, arrays.next())?;
            let mut p = d.perturb(images, b.indices, b.triplets, c.models)?;
            Ok(Answer {
                arrays: vec![std::mem::take(&mut p.images)],
                ..Answer::of(&p)?
            })
        }
        "finish" => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Finish {
                adversarial_loss: f32,
            }
            let steps_done = d.finish_perturbed(read::<Finish>(c.request)?.adversarial_loss)?;
            Answer::of(&json!({ "steps_done": steps_done }))
        }
        "done" => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Done {
                adversarial_loss: f32,
            }
            let steps_done = d.done_by_caller(read::<Done>(c.request)?.adversarial_loss)?;
            Answer::of(&json!({ "steps_done": steps_done }))
        }
        "start_epoch" => {
            let e: EpochStart = read(c.request)?;
            let train = e.training_set.map(|b| Images {
                images: arrays.next().unwrap_or_default(),
                shape: b.shape,
                labels: b.labels,
            });
            d.start_epoch((e.epoch, e.epochs), c.models.into_iter().next(), train, e.batch)?;
            Answer::of(&d.info())
        }
        "state" => Answer::of(&d.save()),
        "load_state" => {
            d.restore(read::<Saved>(c.request)?)?;
            Answer::of(&())
        }
        other => anyhow::bail!("a defense session has no method {other:?}"),
    }
}

fn loss(l: &mut LossSession, c: SessionCall) -> Result<Answer> {
    match c.method {
        "info" => {
            let unit = l.config().unit();
            Answer::of(&json!({
                "kind": l.config().name(),
                "beta": unit.trainable_beta().map(|(b, lr)| json!({"init": b, "lr": lr})),
                "normalized": unit.needs_normalized(),
                "tuples": unit.tuple().is_some(),
            }))
        }
        "compute" => {
            let r: Compute = read(c.request)?;
            let rows = r.labels.len();
            let values = c.arrays.into_iter().next().unwrap_or_default();
            let significand = crate::harden::leaves::significand_bits(r.dtype.as_deref())?;
            let given = Given {
                values,
                rows,
                significand,
            };
            let out = l.compute(given, &r.labels, r.beta, r.indices_tuple)?;
            Ok(Answer {
                arrays: vec![out.grad],
                ..Answer::of(&json!({"loss": out.value, "beta_grad": out.beta_grad, "triplets": out.triplets}))?
            })
        }
        "state" => Answer::of(&json!({ "stream": l.save() })),
        "load_state" => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct State {
                stream: Stream,
            }
            l.restore(read::<State>(c.request)?.stream)?;
            Answer::of(&())
        }
        other => anyhow::bail!("a loss session has no method {other:?}"),
    }
}
