//! Evaluation: embed the test split, then blocked nearest-neighbour metrics, NMI and π_ratio.

mod assign;
mod before;
pub mod cluster;
pub mod diagnostics;
pub mod flat;
pub mod health;
pub mod knn;
pub mod metrics;
mod one_set;
pub mod order;
mod places;

use crate::data::loader::{self, HostBatch};
use crate::data::{EvalSet, ImageSet};
use crate::model::EmbeddingNet;
use anyhow::{Result, ensure};
use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use knn::Embeddings;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The `[eval]` table of an experiment config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    #[serde(default = "d128")]
    pub batch_size: usize,
    #[serde(default = "d_ks")]
    pub recall_ks: Vec<usize>,
    /// Compute NMI (k-means with k = number of test classes).
    #[serde(default = "crate::field::yes")]
    pub nmi: bool,
    /// Lloyd iterations at most (faiss's `niter`, robrank's 25).
    #[serde(default = "kmeans_iters")]
    pub kmeans_iters: usize,
    #[serde(default = "crate::field::yes")]
    pub pi_ratio: bool,
    /// Evaluate after every `every` epochs (0 = only at the end).
    #[serde(default = "one")]
    pub every: usize,
}

fn d128() -> usize {
    128
}
fn kmeans_iters() -> usize {
    cluster::FAISS_NITER
}
fn one() -> usize {
    1
}
fn d_ks() -> Vec<usize> {
    vec![1, 2, 4, 8]
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            batch_size: 128,
            recall_ks: d_ks(),
            nmi: true,
            kmeans_iters: cluster::FAISS_NITER,
            pi_ratio: true,
            every: 1,
        }
    }
}

impl EvalConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(self.batch_size >= 1, "eval.batch_size must be ≥ 1");
        ensure!(
            !self.recall_ks.is_empty() && self.recall_ks.iter().all(|&k| k >= 1),
            "eval.recall_ks must be non-empty, each ≥ 1"
        );
        let mut seen = std::collections::BTreeSet::new();
        if let Some(k) = self.recall_ks.iter().find(|&&k| !seen.insert(k)) {
            anyhow::bail!("eval.recall_ks lists k = {k} twice: each k once (it names a metric, recall@{k})");
        }
        ensure!(self.kmeans_iters >= 1, "eval.kmeans_iters must be ≥ 1");
        Ok(())
    }
}

/// All metrics of one evaluation. In JSON it is one flat object under readable names
/// (`recall@1`, `map@r`, `map@10`, `map`, `r_precision`, `nmi`, `pi_ratio`, …: see
/// [`flat`]); the nested form of rdml ≤ 0.3 (`"recall": [[1, 0.78]]`, `map_at_r`) still reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub retrieval: metrics::Retrieval,
    pub nmi: Option<f64>,
    pub pi_ratio: Option<f64>,
    /// Whether the model is usable at all (see [`health`]); absent in runs of older versions.
    pub health: Option<health::Health>,
    pub embed_seconds: f64,
    pub metric_seconds: f64,
}

impl Metrics {
    pub fn recall_at(&self, k: usize) -> Option<f64> {
        self.retrieval.recall_at(k)
    }
}

/// Turns a host batch into a tensor on `device`.
pub fn batch_tensor(b: &HostBatch, device: &Device) -> Tensor<4> {
    Tensor::<4>::from_data(TensorData::new(b.images.clone(), b.shape), device)
}

/// Embeds every item of `set` with the model in evaluation mode (batch norm on running
/// statistics, no autodiff), batch-norm set 0.
pub fn embed(model: &EmbeddingNet, set: &ImageSet, batch: usize, device: &Device) -> Result<Embeddings> {
    Ok(embed_keyed(model, set, batch, device, false)?.0)
}

/// [`embed`], and with `keys` each item's [`content_key`](crate::data::labelled::content_key)
/// (its image as the model sees it, and its label).
fn embed_keyed(
    model: &EmbeddingNet,
    set: &ImageSet,
    batch: usize,
    device: &Device,
    keys: bool,
) -> Result<(Embeddings, Vec<u128>)> {
    use rayon::prelude::*;
    let model = model.valid();
    let plain = device.clone().without_autodiff();
    let (mut data, mut content) = (Vec::new(), Vec::new());
    let mut dim = 0;
    for b in loader::prefetch(set.clone(), loader::sequential(set.len(), batch), None, 2) {
        let b = b?;
        if keys {
            let per = b.shape[1..].iter().product::<usize>().max(1);
            let rows: Vec<(&[f32], &u32)> = b.images.chunks(per).zip(&b.labels).collect();
            content.par_extend(rows.par_iter().map(|(x, l)| crate::data::labelled::content_key(x, *l)));
        }
        let e = model.forward(batch_tensor(&b, &plain));
        dim = e.dims()[1];
        data.extend(crate::host::read(&e)?);
    }
    Ok((Embeddings::new(data, set.len(), dim)?, content))
}

/// Embeds the test split and computes every metric. A gallery that holds queries' own images
/// (found by content as the model sees them, in any order or subset) is read as
/// [`score_given`] reads given embeddings, with a warning naming it.
pub fn evaluate(model: &EmbeddingNet, test: &EvalSet, cfg: &EvalConfig, seed: u64, device: &Device) -> Result<Metrics> {
    use crate::data::labelled::{Found, own_copies_keyed};
    let t0 = Instant::now();
    let keyed = test.gallery.is_some();
    let (q, qkeys) = embed_keyed(model, &test.query, cfg.batch_size, device, keyed)?;
    let g = match &test.gallery {
        Some(g) => Some((embed_keyed(model, g, cfg.batch_size, device, true)?, g.labels.clone())),
        None => None,
    };
    let embed_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let overlap = g
        .as_ref()
        .map_or(Found::apart(), |((_, gkeys), _)| own_copies_keyed(&qkeys, gkeys));
    let gallery = g.as_ref().map(|((e, _), l)| (e, l.as_slice()));
    let m = score_overlapping(
        (&q, &test.query.labels),
        gallery,
        &overlap,
        (cfg, seed, device),
        &test.query.name,
    )?;
    Ok(Metrics {
        embed_seconds,
        metric_seconds: t1.elapsed().as_secs_f64(),
        ..m
    })
}

/// Metrics of given embeddings (no model involved).
pub fn score(
    q: &Embeddings,
    qlabels: &[u32],
    gallery: Option<(&Embeddings, &[u32])>,
    cfg: &EvalConfig,
    seed: u64,
    device: &Device,
) -> Result<Metrics> {
    score_among(q, qlabels, gallery, None, cfg, seed, device)
}

/// [`score`], with query `i` left out of the gallery at row `own[i]` where it has one (a gallery
/// holding queries' own items, [`crate::data::labelled::own_copies`]).
fn score_among(
    q: &Embeddings,
    qlabels: &[u32],
    gallery: Option<(&Embeddings, &[u32])>,
    own: Option<&[Option<usize>]>,
    cfg: &EvalConfig,
    seed: u64,
    device: &Device,
) -> Result<Metrics> {
    let plain = device.clone().without_autodiff();
    ensure!(q.n > 0, "the test split is empty: nothing to evaluate");
    let left_out = usize::from(own.is_some_and(|o| o.iter().any(Option::is_some)));
    let gallery_size = gallery.map_or(q.n - 1, |(g, _)| g.n - left_out);
    check_recall_ks(&cfg.recall_ks, gallery_size)?;
    // Recall@1 is always computed: the health verdict rests on it.
    let mut ks = cfg.recall_ks.clone();
    if !ks.contains(&1) {
        ks.push(1);
    }
    let mut retrieval = match (gallery, own) {
        (Some((g, gl)), Some(own)) => metrics::retrieval_skipping(q, qlabels, g, gl, Some(own), &ks, &plain)?,
        _ => metrics::retrieval(q, qlabels, gallery, &ks, &plain)?,
    };
    let r1 = retrieval.recall_at(1).unwrap_or(0.0);
    retrieval.recall.retain(|(k, _)| cfg.recall_ks.contains(k));
    let chance = health::chance_recall_at_1(qlabels, gallery.map(|g| g.1));
    let health = health::judge(q, r1, chance, retrieval.queries);
    let k = {
        let mut l = qlabels.to_vec();
        l.sort_unstable();
        l.dedup();
        l.len()
    };
    let nmi = if cfg.nmi {
        let a = cluster::kmeans(q, k, cfg.kmeans_iters, seed, &plain)?;
        Some(cluster::nmi(&a, qlabels))
    } else {
        None
    };
    let pi_ratio = if cfg.pi_ratio && k >= 2 {
        cluster::pi_ratio(q, qlabels, &plain).ok()
    } else {
        None
    };
    Ok(Metrics {
        retrieval,
        nmi,
        pi_ratio,
        health: Some(health),
        embed_seconds: 0.0,
        metric_seconds: 0.0,
    })
}

/// The metrics of embeddings the caller gives (`rdml.metrics`), with the traps of such input
/// closed: a query's own item in the gallery, found by content in any order or subset, is left
/// out of its own list (the gallery that is the queries is read as leave-one-out:
/// pytorch-metric-learning's `ref_includes_query`), with a warning, never a perfect Recall@1 by
/// construction ([`crate::data::labelled`]); metrics that no query defines (no query has another
/// item of its class) are an error, never zeros and NMI 1.
pub fn score_given(
    q: &Embeddings,
    qlabels: &[u32],
    gallery: Option<(&Embeddings, &[u32])>,
    cfg: &EvalConfig,
    seed: u64,
    device: &Device,
) -> Result<Metrics> {
    use crate::data::labelled::{Found, own_copies};
    let t0 = Instant::now();
    let overlap = match gallery {
        Some((g, gl)) if g.dim == q.dim => own_copies((&q.data, qlabels), (&g.data, gl), q.dim, false),
        _ => Found::apart(),
    };
    let mut m = score_overlapping((q, qlabels), gallery, &overlap, (cfg, seed, device), "labels")?;
    m.metric_seconds = t0.elapsed().as_secs_f64();
    Ok(m)
}

/// The metrics of queries among a gallery that holds some of their own items (`overlap`), said
/// in a warning: the gallery that is the queries is read as leave-one-out, a query's own item is
/// left out of its own list. Metrics that no query defines (no query has another item of its
/// class) are an error naming `field`, never zeros and NMI 1.
fn score_overlapping(
    (q, qlabels): (&Embeddings, &[u32]),
    gallery: Option<(&Embeddings, &[u32])>,
    found: &crate::data::labelled::Found,
    (cfg, seed, device): (&EvalConfig, u64, &Device),
    field: &str,
) -> Result<Metrics> {
    use crate::data::labelled::Overlap;
    if let Some(note) = found.note() {
        crate::notes::warn(&note);
    }
    // A query's own item more than once in the gallery: the further copies left out of it.
    let kept = match gallery {
        Some((g, gl)) if !found.copies.is_empty() => {
            let rows = found.kept(g.n);
            let data = rows.iter().flat_map(|&j| g.row(j).iter().copied()).collect();
            let labels: Vec<u32> = rows.iter().map(|&j| gl[j]).collect();
            Some((Embeddings::new(data, rows.len(), g.dim)?, labels))
        }
        _ => None,
    };
    let gallery = kept.as_ref().map(|(e, l)| (e, l.as_slice())).or(gallery);
    let (gallery, own) = match &found.overlap {
        Overlap::Queries => (None, None),
        Overlap::Some { own, .. } => (gallery, Some(own.as_slice())),
        Overlap::Apart => (gallery, None),
    };
    let m = score_among(q, qlabels, gallery, own, cfg, seed, device)?;
    if m.retrieval.lone_queries >= m.retrieval.queries {
        return Err(no_query_to_score(field, gallery.is_some()));
    }
    Ok(m)
}

/// The one refusal of a query set none of whose queries can be scored (no query has another item
/// of its class among those it is ranked against): every scorer (the metrics, the attacks and
/// suite through their clean metrics, certification) says it in these words, naming `field`.
pub fn no_query_to_score(field: &str, gallery: bool) -> anyhow::Error {
    crate::input_error(format!(
        "{field}: no query has another item of its class {}, so Recall@k, MAP@R and NMI are undefined",
        if gallery { "in the gallery" } else { "among the others" }
    ))
}

pub fn check_recall_ks(ks: &[usize], gallery_size: usize) -> Result<()> {
    if let Some(k) = ks.iter().find(|&&k| k > gallery_size) {
        anyhow::bail!(
            "eval.recall_ks has k = {k}, but a query is ranked against {gallery_size} test items: Recall@{k} would be 1 by construction; use k ≤ {gallery_size}"
        );
    }
    Ok(())
}
