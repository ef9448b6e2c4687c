//! The report's retrieval grid: for a few test queries, the query and its nearest neighbours
//! before the attack, then the adversarial query (Algorithm 1 of the positive-perturbation
//! paper: pushed away from its nearest same-class neighbour), its perturbation amplified, and
//! its nearest neighbours after. What a reader sees is what Recall@1 counts.
//!
//! The grid is computed on a run's model and stored in its folder ([`FILE`], with the model's
//! digest), so that the report is drawn from the folder's records alone.

use crate::attack::budget::Pgd;
use crate::attack::context::{Context, embed_tensor};
use crate::attack::method::{Method, WhiteBox};
use crate::data::loader;
use crate::eval::batch_tensor;
use crate::eval::knn::top_k;
use anyhow::{Context as _, Result};
use burn::tensor::Device;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The grid's record in a run folder.
pub const FILE: &str = crate::run_dir::GRID;

/// Neighbours shown per query.
pub const TOP: usize = 8;

/// One image of the grid: a test item and whether it shares the query's label.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub index: usize,
    pub label: u32,
    #[serde(with = "base64_png")]
    pub png: Vec<u8>,
    pub same_label: bool,
}

/// One query's row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GridRow {
    pub query: Cell,
    pub before: Vec<Cell>,
    #[serde(with = "base64_png")]
    pub adversarial: Vec<u8>,
    /// The perturbation, `0.5 + δ / (2·max|δ|)`: mid-grey is no change.
    #[serde(with = "base64_png")]
    pub perturbation: Vec<u8>,
    /// `max|δ|` in pixel units (the amplification is `1 / (2·max|δ|)`).
    pub linf: f32,
    pub after: Vec<Cell>,
}

/// The rows of the grid for up to `queries` test queries whose nearest clean neighbour shares
/// their label (the ones Algorithm 1 attacks), from the start of the test split.
pub fn rows(ctx: &Context, pgd: &Pgd, queries: usize, seed: u64) -> Result<Vec<GridRow>> {
    let set = &ctx.set;
    let shape = set.item_shape();
    let chosen: Vec<usize> = (0..ctx.n())
        .filter(|&i| {
            ctx.neighbours(i, 1)
                .first()
                .is_some_and(|&(_, j)| set.labels[j as usize] == set.labels[i])
        })
        .take(queries)
        .collect();
    if chosen.is_empty() {
        return Ok(vec![]);
    }
    let unit = crate::attack::registry::attack("NN")?;
    let host = loader::load_batch(set, &chosen, None)?;
    let images = batch_tensor(&host, &ctx.device);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let plan = unit.plan(ctx, &chosen, &mut rng)?;
    let adv = WhiteBox.perturb(ctx, &images, plan.as_ref(), unit.optimiser(), pgd, seed, None)?;
    let [b, ..] = adv.images.dims();
    let adv_host = crate::host::read(&adv.images.clone().reshape([b as i32, -1]))?;
    let adv_emb = embed_tensor(ctx.model.as_ref(), adv.images)?;
    let per = shape.iter().product::<usize>();
    let dim = ctx.clean.dim;
    let cells = |q: usize, list: &[(f32, u32)]| -> Result<Vec<Cell>> {
        let idx: Vec<usize> = list.iter().map(|p| p.1 as usize).collect();
        let b = loader::load_batch(set, &idx, None)?;
        idx.iter()
            .enumerate()
            .map(|(r, &j)| {
                Ok(Cell {
                    index: j,
                    label: set.labels[j],
                    png: crate::attack::adversarial::png_bytes(&b.images[r * per..(r + 1) * per], shape)?,
                    same_label: set.labels[j] == set.labels[q],
                })
            })
            .collect()
    };
    let mut out = vec![];
    for (r, &q) in chosen.iter().enumerate() {
        let clean = &host.images[r * per..(r + 1) * per];
        let a = &adv_host[r * per..(r + 1) * per];
        let delta: Vec<f32> = a.iter().zip(clean).map(|(a, c)| a - c).collect();
        let linf = delta.iter().fold(0f32, |m, d| m.max(d.abs()));
        let scale = if linf > 0.0 { 0.5 / linf } else { 0.0 };
        let shown: Vec<f32> = delta.iter().map(|d| 0.5 + d * scale).collect();
        let after = top_k(&ctx.host_dists(&adv_emb[r * dim..(r + 1) * dim]), TOP, Some(q));
        out.push(GridRow {
            query: Cell {
                index: q,
                label: set.labels[q],
                png: crate::attack::adversarial::png_bytes(clean, shape)?,
                same_label: true,
            },
            before: cells(q, &ctx.neighbours(q, TOP))?,
            adversarial: crate::attack::adversarial::png_bytes(a, shape)?,
            perturbation: crate::attack::adversarial::png_bytes(&shown, shape)?,
            linf,
            after: cells(q, &after)?,
        });
    }
    Ok(out)
}

/// The stored grid: its rows, the settings they were computed with, and the digest of the
/// weights they were computed on ([`crate::run_dir::model_digest`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GridRecord {
    pub model_digest: String,
    pub queries: usize,
    pub pgd: Pgd,
    pub seed: u64,
    pub rows: Vec<GridRow>,
}

/// Computes the grid of the run in `dir` (its test data from `data` when given) and stores it
/// in the folder.
pub fn store(
    dir: &Path,
    data: Option<&Path>,
    queries: usize,
    pgd: &Pgd,
    seed: u64,
    device: &Device,
) -> Result<GridRecord> {
    let target = crate::target::Target::open(dir, data, 0, device)?;
    let ctx = target.context(device, false, target.run.exp.eval.batch_size)?;
    let record = GridRecord {
        rows: rows(&ctx, pgd, queries, seed)?,
        model_digest: target.digest.clone(),
        queries,
        pgd: *pgd,
        seed,
    };
    crate::run_dir::check_unchanged(dir, &target.digest, FILE)?;
    crate::run_dir::put_json(dir, FILE, &record)?;
    Ok(record)
}

/// The grid stored in `dir`, when it was computed on the folder's current model (`None`: no
/// grid, an unreadable one, or one of other weights).
pub fn read(dir: &Path) -> Option<GridRecord> {
    let record: GridRecord = crate::read::record(&dir.join(FILE))?;
    let digest = crate::run_dir::model_digest(dir).ok()?;
    (record.model_digest == digest).then_some(record)
}

/// The stored grid when it has these settings, else a new one computed and stored.
pub fn current(
    dir: &Path,
    data: Option<&Path>,
    queries: usize,
    pgd: &Pgd,
    seed: u64,
    device: &Device,
) -> Result<GridRecord> {
    match read(dir) {
        Some(r) if r.queries == queries && r.pgd == *pgd && r.seed == seed => Ok(r),
        _ => store(dir, data, queries, pgd, seed, device).context("the retrieval grid"),
    }
}

/// PNG bytes as base64 text in JSON.
mod base64_png {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(png: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(png))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}
