//! CUB-200-2011: `images.txt` lists `<id> <NNN.Class/file.jpg>`; the class is the `NNN.` prefix.
//! Zero-shot split of the papers: classes 1–100 train, 101–200 test.

use super::set::{EvalSet, ImageSet, Source, Splits, parse_int};
use anyhow::{Result, bail, ensure};
use std::path::Path;
use std::sync::Arc;

pub fn load(root: &Path, resize: usize, crop: usize) -> Result<Splits> {
    let list = root.join("images.txt");
    let text = crate::read::text(&list, crate::read::Follow::Links, crate::read::TEXT)?;
    let (mut paths, mut labels) = (vec![], vec![]);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(_id), Some(name)) = (it.next(), it.next()) else {
            bail!("{}:{}: expected '<image_id> <image_name>'", list.display(), n + 1);
        };
        let images = root.join("images");
        let path = super::set::inside(&images, name, &format!("{}:{}", list.display(), n + 1))?;
        let prefix = name.split('.').next().unwrap_or("");
        let class = parse_int(prefix, &list, n + 1, "class prefix")?;
        ensure!(
            (1..=200).contains(&class),
            "{}:{}: class {class} is not in 1..=200",
            list.display(),
            n + 1
        );
        paths.push(path);
        labels.push(class as u32 - 1);
    }
    ensure!(!paths.is_empty(), "{}: no images listed", list.display());
    Ok(split_half(root, "cub", paths, labels, 100, resize, crop))
}

/// Splits items by class: labels `< first_test` train, the rest test (all test items are both
/// queries and gallery).
pub(crate) fn split_half(
    root: &Path,
    name: &str,
    paths: Vec<std::path::PathBuf>,
    labels: Vec<u32>,
    first_test: u32,
    resize: usize,
    crop: usize,
) -> Splits {
    let _ = root;
    let train: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] < first_test).collect();
    let test: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] >= first_test).collect();
    let all = ImageSet::new(
        name,
        Arc::new(Source::Files {
            paths,
            resize,
            crop,
            train_crop: Default::default(),
        }),
        (0..labels.len()).collect(),
        labels,
    );
    Splits {
        train: all.subset(format!("{name}/train"), &train),
        test: EvalSet {
            query: all.subset(format!("{name}/test"), &test),
            gallery: None,
        },
    }
}

/// CUB-200-2011: its first 100 classes train, the other 100 test.
pub struct Cub;

impl super::dataset::Dataset for Cub {
    fn load(&self, r: &super::request::DataRequest) -> Result<Splits> {
        load(&r.need_root("cub")?, r.resize, r.crop)
    }

    fn image_files(&self) -> bool {
        true
    }
}
