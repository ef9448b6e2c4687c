//! CARS196: `cars_annos.mat` (struct array `annotations` with `relative_im_path`, `class` 1–196,
//! `test`), images under the root. Zero-shot split: classes 1–98 train, 99–196 test.

use super::set::Splits;
use super::{cub::split_half, mat};
use anyhow::{Context, Result, bail, ensure};
use std::path::Path;

/// Reads `(relative path, class 1..=196)` pairs from a `cars_annos.mat`-style file.
pub fn read_annotations(file: &Path) -> Result<Vec<(String, u32)>> {
    let vars = mat::read(file)?;
    let Some(mat::MatValue::Struct { items, fields, .. }) = vars.get("annotations") else {
        bail!("{}: no struct array 'annotations'", file.display());
    };
    for f in ["relative_im_path", "class"] {
        ensure!(
            fields.iter().any(|x| x == f),
            "{}: 'annotations' has no field '{f}' (fields: {fields:?})",
            file.display()
        );
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let path = it["relative_im_path"].text().with_context(|| {
            format!(
                "{}: annotations({}).relative_im_path is not text",
                file.display(),
                i + 1
            )
        })?;
        let class = it["class"]
            .scalar()
            .with_context(|| format!("{}: annotations({}).class is not a number", file.display(), i + 1))?;
        ensure!(
            (1.0..=196.0).contains(&class) && class.fract() == 0.0,
            "{}: annotations({}).class = {class}, expected an integer in 1..=196",
            file.display(),
            i + 1
        );
        let root = file.parent().unwrap_or(Path::new("."));
        super::set::inside(
            root,
            path,
            &format!("{}: annotations({}).relative_im_path", file.display(), i + 1),
        )?;
        out.push((path.to_string(), class as u32));
    }
    Ok(out)
}

pub fn load(root: &Path, resize: usize, crop: usize) -> Result<Splits> {
    let annos = read_annotations(&root.join("cars_annos.mat"))?;
    ensure!(!annos.is_empty(), "{}: no annotations", root.display());
    let paths = annos.iter().map(|(p, _)| root.join(p)).collect();
    let labels = annos.iter().map(|(_, c)| c - 1).collect();
    Ok(split_half(root, "cars", paths, labels, 98, resize, crop))
}

/// Cars196 (`cars_annos.mat`): its first 98 classes train, the other 98 test.
pub struct Cars;

impl super::dataset::Dataset for Cars {
    fn load(&self, r: &super::request::DataRequest) -> Result<Splits> {
        load(&r.need_root("cars")?, r.resize, r.crop)
    }

    fn image_files(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The devkit's files are not in a clone (they are the data set's, not rdml's): run with
    /// `cargo test --release -- --ignored reads_real_devkit` where ../shared/data holds them.
    #[test]
    #[ignore = "needs the Cars196 devkit in ../shared/data/cars196-devkit-mat, which a clone lacks"]
    fn reads_real_devkit_struct_arrays() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/cars196-devkit-mat");
        assert!(dir.is_dir(), "{} not present", dir.display());
        let v = mat::read(&dir.join("cars_train_annos.mat")).unwrap();
        let mat::MatValue::Struct { items, fields, dims } = &v["annotations"] else {
            panic!()
        };
        assert_eq!(items.len(), 8144);
        assert_eq!(dims, &vec![1, 8144]);
        assert_eq!(fields, &["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname"]);
        // First record of the devkit: 00001.jpg, box (39, 116, 569, 375), class 14.
        assert_eq!(items[0]["fname"].text(), Some("00001.jpg"));
        assert_eq!(items[0]["bbox_x1"].scalar(), Some(39.0));
        assert_eq!(items[0]["bbox_x2"].scalar(), Some(569.0));
        assert_eq!(items[0]["class"].scalar(), Some(14.0));
        let t = mat::read(&dir.join("cars_test_annos.mat")).unwrap();
        let mat::MatValue::Struct { items, fields, .. } = &t["annotations"] else {
            panic!()
        };
        assert_eq!(items.len(), 8041);
        assert!(!fields.iter().any(|f| f == "class"));
        let m = mat::read(&dir.join("cars_meta.mat")).unwrap();
        let mat::MatValue::Cell { items, .. } = &m["class_names"] else {
            panic!()
        };
        assert_eq!(items.len(), 196);
        assert_eq!(items[0].text(), Some("AM General Hummer SUV 2000"));
    }
}
