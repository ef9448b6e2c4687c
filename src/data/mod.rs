//! Data sets: where images come from, how an item becomes a `C×H×W` float tensor in [0, 1], and
//! the zero-shot splits of the papers. Normalisation (ImageNet mean/std) happens inside the model,
//! so attack budgets are in pixel units.

pub mod cars;
pub mod check;
pub mod cub;
pub mod folder;
pub mod idx;
pub mod inshop;
pub mod loader;
pub mod mat;
pub mod mnist;
pub mod sampler;
pub mod sop;
pub mod synthetic;
pub mod transform;

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
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

/// Which data set an experiment uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetKind {
    Mnist,
    /// MNIST's test file alone (`t10k-*`, e.g. `../shared/data/mnist-test`), split per class by
    /// `train_fraction` with the seeded rule of the embedded Fashion-MNIST split.
    MnistTestSplit,
    FashionMnist,
    /// The Fashion-MNIST test split embedded in the binary, split into train and test parts.
    FashionMnistEmbedded,
    Cub,
    Cars,
    Sop,
    Inshop,
    Folder,
    Synthetic,
}

/// The `[data]` table of an experiment config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub dataset: DatasetKind,
    /// Root folder of the data set; each kind has a default (see README).
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// File images are resized to `resize × resize` ...
    #[serde(default = "default_resize")]
    pub resize: usize,
    /// ... then cropped to `crop × crop` (random crop + flip for training, centre crop for test).
    #[serde(default = "default_crop")]
    pub crop: usize,
    /// The training crop of image-file data sets: robrank's `{ kind = "random" }` or
    /// `{ kind = "random-resized", scale = [0.6, 1.0] }` (seed 000 Appendix A).
    #[serde(default)]
    pub train_crop: transform::TrainCrop,
    /// Fraction of each class that goes to training when a split is made by rule
    /// (`fashion-mnist-embedded`).
    #[serde(default = "default_train_fraction")]
    pub train_fraction: f64,
    /// Synthetic two-Gaussian data (positive-perturbation paper, Appendix E).
    #[serde(default)]
    pub synthetic: synthetic::SyntheticConfig,
}

fn default_resize() -> usize {
    256
}
fn default_crop() -> usize {
    224
}
fn default_train_fraction() -> f64 {
    0.8
}

impl DataConfig {
    /// `--data DIR`: read the data set from `dir` instead of the config's root. A config on the
    /// embedded Fashion-MNIST split then reads the full Fashion-MNIST in `dir`.
    pub fn use_folder(&mut self, dir: &std::path::Path) {
        self.root = Some(dir.to_path_buf());
        if self.dataset == DatasetKind::FashionMnistEmbedded {
            self.dataset = DatasetKind::FashionMnist;
        }
    }

    pub fn validate(&self) -> Result<()> {
        const MAX_RESIZE: usize = 4096;
        anyhow::ensure!(
            self.crop > 0 && self.resize >= self.crop,
            "data.crop must be in 1..=data.resize"
        );
        // A resize target is allocated per image and per batch: 4096 (75× the papers' 224)
        // keeps a typo (100000: 30 GB per image) from aborting the process.
        anyhow::ensure!(
            self.resize <= MAX_RESIZE,
            "data.resize = {} exceeds rdml's limit of {MAX_RESIZE} pixels (the papers use 256, cropped to 224)",
            self.resize
        );
        anyhow::ensure!(
            self.train_fraction > 0.0 && self.train_fraction < 1.0,
            "data.train_fraction must be in (0, 1), got {}",
            self.train_fraction
        );
        self.train_crop.validate()?;
        let files = matches!(
            self.dataset,
            DatasetKind::Cub | DatasetKind::Cars | DatasetKind::Sop | DatasetKind::Inshop | DatasetKind::Folder
        );
        anyhow::ensure!(
            files || self.train_crop == transform::TrainCrop::Random,
            "data.train_crop applies to image-file data sets (cub, cars, sop, inshop, folder); data.dataset = {} holds images in memory, used as they are",
            toml::Value::try_from(self.dataset).map_or_else(|_| format!("{:?}", self.dataset), |v| v.to_string())
        );
        self.synthetic.validate()
    }

    /// Loads the data set and returns its train/test split. `seed` drives any split made by rule.
    pub fn load(&self, seed: u64) -> Result<Splits> {
        let mut splits = self.load_as_listed(seed)?;
        if let Source::Files {
            paths, resize, crop, ..
        } = &*splits.train.source
        {
            splits.train.source = Arc::new(Source::Files {
                paths: paths.clone(),
                resize: *resize,
                crop: *crop,
                train_crop: self.train_crop,
            });
        }
        Ok(splits)
    }

    fn load_as_listed(&self, seed: u64) -> Result<Splits> {
        self.validate()?;
        let root = self.root.clone();
        match self.dataset {
            DatasetKind::Mnist => mnist::load(self.idx_root("MNIST"), "mnist"),
            DatasetKind::FashionMnist => mnist::load(self.idx_root("FashionMNIST"), "fashion-mnist"),
            DatasetKind::MnistTestSplit => {
                mnist::test_file_split(&self.idx_root("MNIST"), "mnist-test-split", self.train_fraction, seed)
            }
            DatasetKind::FashionMnistEmbedded => mnist::embedded_fashion(self.train_fraction, seed),
            DatasetKind::Cub => cub::load(&need_root(root, "cub")?, self.resize, self.crop),
            DatasetKind::Cars => cars::load(&need_root(root, "cars")?, self.resize, self.crop),
            DatasetKind::Sop => sop::load(&need_root(root, "sop")?, self.resize, self.crop),
            DatasetKind::Inshop => inshop::load(&need_root(root, "inshop")?, self.resize, self.crop),
            DatasetKind::Folder => folder::load(&need_root(root, "folder")?, self.resize, self.crop),
            DatasetKind::Synthetic => synthetic::load(&self.synthetic, seed),
        }
    }

    /// The folder of MNIST-format files: `data.root`, else the default for `name`.
    fn idx_root(&self, name: &str) -> PathBuf {
        self.root.clone().unwrap_or_else(|| mnist::default_root(name))
    }

    /// Loads the test side alone: MNIST-format data sets read only their `t10k-*` files; the
    /// others (whose test split is a rule over one listing or file) load as [`load`](Self::load).
    pub fn load_test(&self, seed: u64) -> Result<EvalSet> {
        self.validate()?;
        match self.dataset {
            DatasetKind::Mnist => mnist::load_test(&self.idx_root("MNIST"), "mnist"),
            DatasetKind::FashionMnist => mnist::load_test(&self.idx_root("FashionMNIST"), "fashion-mnist"),
            _ => Ok(self.load(seed)?.test),
        }
    }
}

fn need_root(root: Option<PathBuf>, kind: &str) -> Result<PathBuf> {
    root.with_context(|| format!("data.root must name the folder of the {kind} data set"))
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
