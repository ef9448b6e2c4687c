//! MNIST and Fashion-MNIST: 60,000 train and 10,000 test images of 10 classes, 28×28 gray.
//! robrank trains on the train file and evaluates on the whole test file (same classes).

use super::dataset::Dataset;
use super::idx;
use super::request::DataRequest;
use super::set::{EvalSet, ImageSet, Source, Splits};
use anyhow::{Context, Result, ensure};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The Fashion-MNIST test split (MIT, © Zalando SE), shipped so that `quickstart` works offline.
const EMBEDDED_IMAGES: &[u8] = include_bytes!("../../data/fashion-mnist/t10k-images-idx3-ubyte.gz");
const EMBEDDED_LABELS: &[u8] = include_bytes!("../../data/fashion-mnist/t10k-labels-idx1-ubyte.gz");

/// Default folder: the Debian package's for Fashion-MNIST, else robrank's `~/.torch/<name>/raw`.
pub fn default_root(name: &str) -> PathBuf {
    let debian = PathBuf::from("/usr/share/datasets/fashion-mnist");
    if name == "FashionMNIST" && debian.is_dir() {
        return debian;
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    home.join(".torch").join(name).join("raw")
}

/// Whether the full Fashion-MNIST files are present in `dir`.
pub fn full_set_present(dir: &Path) -> bool {
    idx::find_pair(dir, "train").is_ok() && idx::find_pair(dir, "t10k").is_ok()
}

fn to_set(name: &str, img: idx::IdxImages, labels: Vec<u8>) -> ImageSet {
    let n = img.n;
    let source = Arc::new(Source::Pixels {
        data: img.pixels,
        channels: 1,
        height: img.rows,
        width: img.cols,
    });
    ImageSet::new(
        name,
        source,
        (0..n).collect(),
        labels.into_iter().map(u32::from).collect(),
    )
}

/// Loads `train-*` and `t10k-*` IDX files from `root`.
pub fn load(root: PathBuf, name: &str) -> Result<Splits> {
    let (ti, tl) = idx::find_pair(&root, "train")?;
    let (vi, vl) = idx::find_pair(&root, "t10k")?;
    let (img, lab) = idx::read_pair(&ti, &tl)?;
    let train = to_set(&format!("{name}/train"), img, lab);
    let (img, lab) = idx::read_pair(&vi, &vl)?;
    let test = to_set(&format!("{name}/test"), img, lab);
    ensure!(
        train.item_shape() == test.item_shape(),
        "{name}: train and test images differ in size"
    );
    Ok(Splits {
        train,
        test: EvalSet {
            query: test,
            gallery: None,
        },
    })
}

/// Loads the `t10k-*` IDX files of `root` alone (evaluation needs nothing else).
pub fn load_test(root: &Path, name: &str) -> Result<EvalSet> {
    let (vi, vl) = idx::find_pair(root, "t10k")?;
    let (img, lab) = idx::read_pair(&vi, &vl)?;
    Ok(EvalSet {
        query: to_set(&format!("{name}/test"), img, lab),
        gallery: None,
    })
}

/// The embedded Fashion-MNIST test split, divided by a seeded rule: within each class, the items
/// are shuffled by a ChaCha8 generator seeded with `seed`, and the first
/// `round(train_fraction · class size)` go to training, the rest to test.
pub fn embedded_fashion(train_fraction: f64, seed: u64) -> Result<Splits> {
    let img = idx::parse_images(&gunzip(EMBEDDED_IMAGES)?, "embedded fashion-mnist images")?;
    let lab = idx::parse_labels(&gunzip(EMBEDDED_LABELS)?, "embedded fashion-mnist labels")?;
    let all = to_set("fashion-mnist-embedded", img, lab);
    let (train, test) = split_by_class(&all, train_fraction, seed);
    Ok(Splits {
        train: all.subset("fashion-mnist-embedded/train", &train),
        test: EvalSet {
            query: all.subset("fashion-mnist-embedded/test", &test),
            gallery: None,
        },
    })
}

/// The `t10k-*` files of `root` alone, divided into train and test parts by the rule of
/// [`embedded_fashion`].
pub fn test_file_split(root: &Path, name: &str, train_fraction: f64, seed: u64) -> Result<Splits> {
    let (vi, vl) = idx::find_pair(root, "t10k")?;
    let (img, lab) = idx::read_pair(&vi, &vl)?;
    let all = to_set(name, img, lab);
    let (train, test) = split_by_class(&all, train_fraction, seed);
    Ok(Splits {
        train: all.subset(format!("{name}/train"), &train),
        test: EvalSet {
            query: all.subset(format!("{name}/test"), &test),
            gallery: None,
        },
    })
}

/// Positions of `set` for training and test under the per-class seeded rule.
pub fn split_by_class(set: &ImageSet, train_fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut classes: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (p, &l) in set.labels.iter().enumerate() {
        classes.entry(l).or_default().push(p);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut train, mut test) = (vec![], vec![]);
    for (_, mut items) in classes {
        items.shuffle(&mut rng);
        let k = (train_fraction * items.len() as f64).round() as usize;
        train.extend_from_slice(&items[..k]);
        test.extend_from_slice(&items[k..]);
    }
    train.sort_unstable();
    test.sort_unstable();
    (train, test)
}

fn gunzip(bytes: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .context("embedded data is corrupt")?;
    Ok(out)
}

/// The folder of MNIST-format files: `data.root`, else the default for `name`.
fn idx_root(r: &DataRequest, name: &str) -> PathBuf {
    r.root.clone().unwrap_or_else(|| default_root(name))
}

/// MNIST (`data.root`, else its default folder).
pub struct Mnist;

impl Dataset for Mnist {
    fn load(&self, r: &DataRequest) -> Result<Splits> {
        load(idx_root(r, "MNIST"), "mnist")
    }

    fn load_test(&self, r: &DataRequest) -> Option<Result<EvalSet>> {
        Some(load_test(&idx_root(r, "MNIST"), "mnist"))
    }
}

/// Fashion-MNIST (`data.root`, else its default folder).
pub struct FashionMnist;

impl Dataset for FashionMnist {
    fn load(&self, r: &DataRequest) -> Result<Splits> {
        load(idx_root(r, "FashionMNIST"), "fashion-mnist")
    }

    fn load_test(&self, r: &DataRequest) -> Option<Result<EvalSet>> {
        Some(load_test(&idx_root(r, "FashionMNIST"), "fashion-mnist"))
    }
}

/// MNIST's test file alone (`t10k-*`, e.g. `../shared/data/mnist-test`), split per class by
/// `train_fraction` with the seeded rule of the embedded Fashion-MNIST split.
pub struct MnistTestSplit;

impl Dataset for MnistTestSplit {
    fn load(&self, r: &DataRequest) -> Result<Splits> {
        test_file_split(&idx_root(r, "MNIST"), "mnist-test-split", r.train_fraction, r.seed)
    }
}

/// The Fashion-MNIST test split embedded in the binary, split into train and test parts.
pub struct FashionMnistEmbedded;

impl Dataset for FashionMnistEmbedded {
    fn load(&self, r: &DataRequest) -> Result<Splits> {
        embedded_fashion(r.train_fraction, r.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_split_is_per_class_and_seeded() {
        let s = embedded_fashion(0.8, 0).unwrap();
        assert_eq!(s.train.len(), 8000);
        assert_eq!(s.test.query.len(), 2000);
        assert_eq!(s.train.num_classes(), 10);
        let again = embedded_fashion(0.8, 0).unwrap();
        assert_eq!(s.train.indices, again.train.indices);
        let other = embedded_fashion(0.8, 1).unwrap();
        assert_ne!(s.train.indices, other.train.indices);
        // Fashion-MNIST's test file has 1000 items per class: 800 train, 200 test each.
        assert_eq!(s.test.query.labels.iter().filter(|&&l| l == 3).count(), 200);
    }
}
