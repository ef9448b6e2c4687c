//! `rdml embed`: a trained model's embeddings of a split, with their labels and item ids, in a
//! file a vector index reads: safetensors, NumPy `.npz` (one archive), or NumPy `.npy` (the
//! embeddings, with `NAME.labels.npy`, `NAME.ids.npy` and `NAME.split.npy` beside it).
//!
//! Arrays: `embeddings` f32 `[n, d]`; `labels` i64 `[n]` (the class index rdml trained on);
//! `ids` i64 `[n]` (the item's position in its part of the data set, as `eval` and the attacks
//! number test items); `split` u8 `[n]` (0 training, 1 test queries, 2 test gallery).

mod formats;
mod npy_set;
use crate::attack::adversarial::AdversarialSink;
use crate::eval::knn::Embeddings;
use anyhow::{Result, bail, ensure};
use burn::tensor::Tensor;
pub use formats::write;
pub use npy_set::{check_out, files, manifest_path, output_files, verify_set};
use std::path::Path;

/// Which items to embed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
    All,
}

impl std::str::FromStr for Split {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "train" => Ok(Split::Train),
            "test" => Ok(Split::Test),
            "all" => Ok(Split::All),
            _ => bail!("unknown split '{s}': expected train, test or all"),
        }
    }
}

/// Split codes of the `split` array.
pub const TRAIN: u8 = 0;
pub const QUERY: u8 = 1;
pub const GALLERY: u8 = 2;

/// Embeddings with what identifies each row.
#[derive(Debug, Clone, Default)]
pub struct Exported {
    pub embeddings: Vec<f32>,
    pub dim: usize,
    pub labels: Vec<u32>,
    pub ids: Vec<u64>,
    pub split: Vec<u8>,
}

impl Exported {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Appends a part's embeddings (`labels[i]` the label of row `i`, ids `0..n`).
    pub fn push(&mut self, e: &Embeddings, labels: &[u32], split: u8) -> Result<()> {
        ensure!(e.n == labels.len(), "{} embeddings for {} labels", e.n, labels.len());
        ensure!(self.dim == 0 || self.dim == e.dim, "embedding sizes differ");
        self.dim = e.dim;
        self.embeddings.extend_from_slice(&e.data);
        self.labels.extend_from_slice(labels);
        self.ids.extend(0..e.n as u64);
        self.split.extend(std::iter::repeat_n(split, e.n));
        Ok(())
    }
}

/// Collects the embeddings of an attack's adversarial images (see `rdml embed --attack`).
pub struct AttackedEmbeddings<'a> {
    model: &'a dyn crate::attack::oracle::Oracle,
    pub out: Exported,
}

impl<'a> AttackedEmbeddings<'a> {
    pub fn new(model: &'a dyn crate::attack::oracle::Oracle) -> Self {
        Self {
            model,
            out: Exported::default(),
        }
    }
}

impl AdversarialSink for AttackedEmbeddings<'_> {
    fn add(&mut self, items: &[usize], labels: &[u32], _clean: &Tensor<4>, adv: &Tensor<4>) -> Result<()> {
        let e = crate::attack::context::embed_tensor(self.model, adv.clone())?;
        self.out.dim = e.len() / items.len().max(1);
        self.out.embeddings.extend(e);
        self.out.labels.extend(items.iter().map(|&i| labels[i]));
        self.out.ids.extend(items.iter().map(|&i| i as u64));
        self.out.split.extend(std::iter::repeat_n(QUERY, items.len()));
        Ok(())
    }
}

/// The formats by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    Npz,
    Npy,
}

impl Format {
    pub fn of(path: &Path) -> Result<Self> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("safetensors") => Ok(Format::Safetensors),
            Some("npz") => Ok(Format::Npz),
            Some("npy") => Ok(Format::Npy),
            _ => bail!(
                "{}: the name must end in .safetensors, .npz (NumPy, one archive) or .npy (NumPy, with .labels.npy, .ids.npy and .split.npy beside it)",
                path.display()
            ),
        }
    }
}

/// The clean embeddings of a run's `split` (its data as loaded by [`crate::train::load_run`]),
/// and a few words on what they are.
pub fn embed_split(
    run: &crate::train::LoadedRun,
    split: Split,
    device: &burn::tensor::Device,
) -> Result<(Exported, String)> {
    let batch = run.exp.eval.batch_size;
    let mut out = Exported::default();
    let mut parts = vec![];
    if matches!(split, Split::Train | Split::All) {
        let train = run.exp.data.load(run.exp.seed)?.train;
        out.push(
            &crate::eval::embed(&run.net, &train, batch, device)?,
            &train.labels,
            TRAIN,
        )?;
        parts.push(format!("{} training", train.len()));
    }
    if matches!(split, Split::Test | Split::All) {
        let q = &run.test.query;
        out.push(&crate::eval::embed(&run.net, q, batch, device)?, &q.labels, QUERY)?;
        parts.push(format!("{} test", q.len()));
        if let Some(g) = &run.test.gallery {
            out.push(&crate::eval::embed(&run.net, g, batch, device)?, &g.labels, GALLERY)?;
            parts.push(format!("{} gallery", g.len()));
        }
    }
    Ok((out, format!("{} items", parts.join(" + "))))
}
