//! Data sets: where images come from, how an item becomes a `C×H×W` float tensor in [0, 1], and
//! the zero-shot splits of the papers. Normalisation (ImageNet mean/std) happens inside the model,
//! so attack budgets are in pixel units.

pub mod cars;
pub mod check;
pub mod cub;
pub mod dataset;
#[cfg(test)]
mod example;
pub mod folder;
pub mod idx;
pub mod inshop;
pub mod labelled;
pub mod loader;
pub mod mat;
pub mod mnist;
pub mod request;
pub mod sampler;
pub mod set;
pub mod sop;
pub mod synthetic;
pub mod transform;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

pub use set::{EvalSet, ImageSet, Source, Splits};

dataset::dataset_registry! {
    /// Which data set an experiment uses (`data.dataset`).
    pub enum DatasetKind {
        "mnist" => Mnist(mnist::Mnist),
        "mnist-test-split" => MnistTestSplit(mnist::MnistTestSplit),
        "fashion-mnist" => FashionMnist(mnist::FashionMnist),
        "fashion-mnist-embedded" => FashionMnistEmbedded(mnist::FashionMnistEmbedded),
        "cub" => Cub(cub::Cub),
        "cars" => Cars(cars::Cars),
        "sop" => Sop(sop::Sop),
        "inshop" => Inshop(inshop::Inshop),
        "folder" => Folder(folder::Folder),
        "synthetic" => Synthetic(synthetic::Synthetic),
        #[cfg(test)]
        "example-stripes" => ExampleStripes(example::Stripes),
    }
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
        let files: Vec<&str> = DatasetKind::all()
            .into_iter()
            .filter(|k| k.unit().image_files())
            .map(DatasetKind::name)
            .collect();
        anyhow::ensure!(
            self.dataset.unit().image_files() || self.train_crop == transform::TrainCrop::Random,
            "data.train_crop applies to image-file data sets ({}); data.dataset = \"{}\" holds images in memory, used as they are",
            files.join(", "),
            self.dataset.name()
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
        self.dataset.unit().load(&self.request(seed))
    }

    /// What the data set's loader reads of this table.
    fn request(&self, seed: u64) -> request::DataRequest<'_> {
        request::DataRequest {
            root: self.root.clone(),
            resize: self.resize,
            crop: self.crop,
            train_fraction: self.train_fraction,
            seed,
            synthetic: &self.synthetic,
        }
    }

    /// Loads the test side alone: MNIST-format data sets read only their `t10k-*` files; the
    /// others (whose test split is a rule over one listing or file) load as [`load`](Self::load).
    pub fn load_test(&self, seed: u64) -> Result<EvalSet> {
        self.validate()?;
        match self.dataset.unit().load_test(&self.request(seed)) {
            Some(test) => test,
            None => Ok(self.load(seed)?.test),
        }
    }
}
