//! A class-per-folder image tree: `root/<class>/*.{jpg,jpeg,png}`. Classes sorted by name; the
//! first half train, the second half test (the zero-shot convention of Roth et al.).

use super::cub::split_half;
use super::set::Splits;
use anyhow::{Context, Result, ensure};
use std::path::Path;

pub fn load(root: &Path, resize: usize, crop: usize) -> Result<Splits> {
    let mut classes: Vec<_> = std::fs::read_dir(root)
        .with_context(|| format!("cannot list {}", root.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.path())
        .collect();
    classes.sort();
    ensure!(
        classes.len() >= 2,
        "{}: need at least two class folders, found {}",
        root.display(),
        classes.len()
    );
    let (mut paths, mut labels) = (vec![], vec![]);
    for (c, dir) in classes.iter().enumerate() {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| matches!(x.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png"))
            })
            .collect();
        files.sort();
        ensure!(
            !files.is_empty(),
            "{}: class folder holds no .jpg/.jpeg/.png image",
            dir.display()
        );
        labels.extend(std::iter::repeat_n(c as u32, files.len()));
        paths.extend(files);
    }
    Ok(split_half(
        root,
        "folder",
        paths,
        labels,
        classes.len().div_ceil(2) as u32,
        resize,
        crop,
    ))
}

/// A folder of class folders of images: the first half of the classes train.
pub struct Folder;

impl super::dataset::Dataset for Folder {
    fn load(&self, r: &super::request::DataRequest) -> Result<Splits> {
        load(&r.need_root("folder")?, r.resize, r.crop)
    }

    fn image_files(&self) -> bool {
        true
    }
}
