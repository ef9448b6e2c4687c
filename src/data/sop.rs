//! Stanford Online Products: `Ebay_train.txt` / `Ebay_test.txt`, one header line then
//! `image_id class_id super_class_id path`. The lists are the split (11,318 train classes,
//! 11,316 test classes).

use super::set::{EvalSet, ImageSet, Source, Splits, parse_int};
use anyhow::{Result, bail, ensure};
use std::path::Path;
use std::sync::Arc;

fn read_list(root: &Path, file: &str) -> Result<Vec<(String, u32)>> {
    let list = root.join(file);
    let text = crate::read::text(&list, crate::read::Follow::Links, crate::read::TEXT)?;
    let mut out = vec![];
    for (n, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() != 4 {
            bail!(
                "{}:{}: expected 'image_id class_id super_class_id path', got {} fields",
                list.display(),
                n + 1,
                cols.len()
            );
        }
        let class = parse_int(cols[1], &list, n + 1, "class_id")?;
        ensure!(
            (1..=i64::from(u32::MAX)).contains(&class),
            "{}:{}: class_id {class} is out of range (1 to {})",
            list.display(),
            n + 1,
            u32::MAX
        );
        super::set::inside(root, cols[3], &format!("{}:{}", list.display(), n + 1))?;
        out.push((cols[3].to_string(), class as u32 - 1));
    }
    ensure!(!out.is_empty(), "{}: no images listed", list.display());
    Ok(out)
}

pub fn load(root: &Path, resize: usize, crop: usize) -> Result<Splits> {
    let train = read_list(root, "Ebay_train.txt")?;
    let test = read_list(root, "Ebay_test.txt")?;
    let mk = |name: &str, items: Vec<(String, u32)>| {
        let paths = items.iter().map(|(p, _)| root.join(p)).collect();
        let labels: Vec<u32> = items.iter().map(|(_, c)| *c).collect();
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
        train: mk("sop/train", train),
        test: EvalSet {
            query: mk("sop/test", test),
            gallery: None,
        },
    })
}

/// Stanford Online Products: its listed train and test splits.
pub struct Sop;

impl super::dataset::Dataset for Sop {
    fn load(&self, r: &super::request::DataRequest) -> Result<Splits> {
        load(&r.need_root("sop")?, r.resize, r.crop)
    }

    fn image_files(&self) -> bool {
        true
    }
}
