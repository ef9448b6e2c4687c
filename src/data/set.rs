//! What a loaded data set is: where its pixels live (`Source`), a split of items (`ImageSet`),
//! the test side with its optional gallery (`EvalSet`), both splits (`Splits`); and the checks
//! its loaders share for paths and numbers read from list files.

use super::transform;
use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the pixels of a data set live.
#[derive(Debug)]
pub enum Source {
    /// 8-bit images held in memory, `n × c × h × w`.
    Pixels {
        data: Vec<u8>,
        channels: usize,
        height: usize,
        width: usize,
    },
    /// Float images held in memory (synthetic data), `n × c × h × w`.
    Floats {
        data: Vec<f32>,
        channels: usize,
        height: usize,
        width: usize,
    },
    /// Image files decoded on demand (JPEG/PNG), resized then cropped to `crop × crop` RGB.
    Files {
        paths: Vec<PathBuf>,
        resize: usize,
        crop: usize,
        /// The training crop (`data.train_crop`; the test side always centre-crops).
        train_crop: transform::TrainCrop,
    },
}

impl Source {
    pub fn len(&self) -> usize {
        match self {
            Source::Pixels {
                data,
                channels,
                height,
                width,
            } => data.len() / (channels * height * width),
            Source::Floats {
                data,
                channels,
                height,
                width,
            } => data.len() / (channels * height * width),
            Source::Files { paths, .. } => paths.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The shape `[c, h, w]` of one item as the model sees it.
    pub fn item_shape(&self) -> [usize; 3] {
        match self {
            Source::Pixels {
                channels,
                height,
                width,
                ..
            }
            | Source::Floats {
                channels,
                height,
                width,
                ..
            } => [*channels, *height, *width],
            Source::Files { crop, .. } => [3, *crop, *crop],
        }
    }
}

/// A labelled view of a source: the items `indices` of `source` with their class labels.
#[derive(Debug, Clone)]
pub struct ImageSet {
    pub name: String,
    pub source: Arc<Source>,
    pub indices: Vec<usize>,
    pub labels: Vec<u32>,
}

impl ImageSet {
    pub fn new(name: impl Into<String>, source: Arc<Source>, indices: Vec<usize>, labels: Vec<u32>) -> Self {
        assert_eq!(indices.len(), labels.len());
        Self {
            name: name.into(),
            source,
            indices,
            labels,
        }
    }
    pub fn len(&self) -> usize {
        self.indices.len()
    }
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
    pub fn item_shape(&self) -> [usize; 3] {
        self.source.item_shape()
    }
    pub fn num_classes(&self) -> usize {
        let mut l = self.labels.clone();
        l.sort_unstable();
        l.dedup();
        l.len()
    }
    /// A view of the items at positions `pos` of this set.
    pub fn subset(&self, name: impl Into<String>, pos: &[usize]) -> Self {
        Self::new(
            name,
            self.source.clone(),
            pos.iter().map(|&p| self.indices[p]).collect(),
            pos.iter().map(|&p| self.labels[p]).collect(),
        )
    }

    /// Writes item `pos` into `out` (`c·h·w` floats in [0, 1]). `augment` applies the training
    /// transform (random crop and horizontal flip) to file images; in-memory images are used as
    /// they are, as robrank does for 28×28 data.
    pub fn load_into(&self, pos: usize, augment: Option<u64>, out: &mut [f32]) -> Result<()> {
        let i = self.indices[pos];
        match &*self.source {
            Source::Pixels {
                data,
                channels,
                height,
                width,
            } => {
                let n = channels * height * width;
                for (o, &p) in out.iter_mut().zip(&data[i * n..(i + 1) * n]) {
                    *o = p as f32 / 255.0;
                }
            }
            Source::Floats {
                data,
                channels,
                height,
                width,
            } => {
                let n = channels * height * width;
                out.copy_from_slice(&data[i * n..(i + 1) * n]);
            }
            Source::Files {
                paths,
                resize,
                crop,
                train_crop,
            } => {
                let mut rng = augment.map(ChaCha8Rng::seed_from_u64);
                transform::load_file(&paths[i], (*resize, *crop), *train_crop, rng.as_mut(), out)
                    .with_context(|| format!("{}: item {pos}", self.name))?;
            }
        }
        Ok(())
    }
}

/// The test side of a split: queries searched against a gallery, or (gallery `None`) every item
/// against all others, leaving itself out.
#[derive(Debug, Clone)]
pub struct EvalSet {
    pub query: ImageSet,
    pub gallery: Option<ImageSet>,
}

/// A train set and the test set of a zero-shot (or, for 28×28 data, same-class) split.
#[derive(Debug, Clone)]
pub struct Splits {
    pub train: ImageSet,
    pub test: EvalSet,
}

/// Counts labels and makes them readable in errors.
/// `rel` (a path read from a list file: `where_` names the file and line) joined under `root`,
/// refused when it could leave it: an absolute path, or any `..` component.
pub(crate) fn inside(root: &std::path::Path, rel: &str, where_: &str) -> Result<std::path::PathBuf> {
    use std::path::Component;
    let p = std::path::Path::new(rel);
    let escapes = p
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    anyhow::ensure!(
        !escapes && !rel.is_empty(),
        "{where_}: path '{rel}' leaves the data folder (absolute, or with a '..' component); \
         expected a path relative to {}",
        root.display()
    );
    Ok(root.join(p))
}

pub(crate) fn parse_int(s: &str, file: &std::path::Path, line: usize, what: &str) -> Result<i64> {
    s.trim()
        .parse::<i64>()
        .with_context(|| format!("{}:{line}: {what} '{s}' is not an integer", file.display()))
}
