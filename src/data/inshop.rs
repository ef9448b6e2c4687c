//! In-Shop Clothes Retrieval: `Eval/list_eval_partition.txt` (a count line, a header line, then
//! `img/... id_XXXXXXXX train|query|gallery`), images under `Img/`. Queries are searched in the
//! gallery; the item id is the class.

use super::set::{EvalSet, ImageSet, Source, Splits};
use anyhow::{Context, Result, bail, ensure};
use std::path::Path;
use std::sync::Arc;

pub fn load(root: &Path, resize: usize, crop: usize) -> Result<Splits> {
    let list = root.join("Eval").join("list_eval_partition.txt");
    let text = crate::read::text(&list, crate::read::Follow::Links, crate::read::TEXT)?;
    let mut parts: [(Vec<std::path::PathBuf>, Vec<u32>); 3] = Default::default();
    for (n, line) in text.lines().enumerate().skip(2) {
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() != 3 {
            bail!(
                "{}:{}: expected 'image_name item_id evaluation_status'",
                list.display(),
                n + 1
            );
        }
        let id = cols[1]
            .strip_prefix("id_")
            .and_then(|s| s.parse::<u32>().ok())
            .with_context(|| {
                format!(
                    "{}:{}: item_id '{}' is not of the form id_NNNNNNNN",
                    list.display(),
                    n + 1,
                    cols[1]
                )
            })?;
        let which = match cols[2] {
            "train" => 0,
            "query" => 1,
            "gallery" => 2,
            s => bail!(
                "{}:{}: evaluation_status '{s}', expected train, query or gallery",
                list.display(),
                n + 1
            ),
        };
        let img = root.join("Img");
        parts[which].0.push(super::set::inside(
            &img,
            cols[0],
            &format!("{}:{}", list.display(), n + 1),
        )?);
        parts[which].1.push(id);
    }
    let [train, query, gallery] = parts.map(|(paths, labels)| (paths, labels));
    for (name, p) in [("train", &train), ("query", &query), ("gallery", &gallery)] {
        ensure!(!p.0.is_empty(), "{}: no {name} images", list.display());
    }
    let mk = |name: &str, (paths, labels): (Vec<std::path::PathBuf>, Vec<u32>)| {
        let n = labels.len();
        ImageSet::new(
            name,
            Arc::new(Source::Files {
                paths,
                resize,
                crop,
                train_crop: Default::default(),
            }),
            (0..n).collect(),
            labels,
        )
    };
    Ok(Splits {
        train: mk("inshop/train", train),
        test: EvalSet {
            query: mk("inshop/query", query),
            gallery: Some(mk("inshop/gallery", gallery)),
        },
    })
}

/// In-Shop Clothes: its train split, and its queries ranked among its gallery.
pub struct Inshop;

impl super::dataset::Dataset for Inshop {
    fn load(&self, r: &super::request::DataRequest) -> Result<Splits> {
        load(&r.need_root("inshop")?, r.resize, r.crop)
    }

    fn image_files(&self) -> bool {
        true
    }
}
