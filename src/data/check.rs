//! Checks a loaded data set before any training or output: both splits non-empty, the batch and
//! Recall@k within them, and every image file readable (its header decoded, not the whole image:
//! a header read costs well under a millisecond, a full decode of a 224×224 JPEG several), so a
//! bad file in the test split is found before an epoch of training, not after.

use super::set::{ImageSet, Source, Splits};
use crate::data::sampler::SamplerConfig;
use anyhow::{Context, Result, ensure};
use rayon::prelude::*;

/// Checks `splits` for training with `sampler` and for evaluation; returns the number of gallery
/// items a query is ranked against (for the caller's Recall@k check).
pub fn for_training(splits: &Splits, sampler: &SamplerConfig) -> Result<usize> {
    let train = &splits.train;
    ensure!(!train.is_empty(), "{}: the training split is empty", train.name);
    let b = sampler.batch_size();
    ensure!(
        b <= train.len(),
        "train.sampler: a batch of {b} images is larger than the training split ({} items of {}); lower train.sampler.{}",
        train.len(),
        train.name,
        match sampler {
            SamplerConfig::Spc2 { .. } => "pairs",
            SamplerConfig::ClassBalanced { .. } => "classes or per_class",
        }
    );
    files(train)?;
    for_evaluation(splits)
}

/// Checks the test side of `splits` for evaluation; returns the number of gallery items a query
/// is ranked against.
pub fn for_evaluation(splits: &Splits) -> Result<usize> {
    let t = &splits.test;
    ensure!(
        !t.query.is_empty(),
        "{}: the test split is empty (no test items in the data set's files)",
        t.query.name
    );
    let gallery = match &t.gallery {
        Some(g) => {
            ensure!(!g.is_empty(), "{}: the gallery is empty", g.name);
            files(g)?;
            g.len()
        }
        None => t.query.len() - 1,
    };
    files(&t.query)?;
    let ranked = t.gallery.as_ref().unwrap_or(&t.query);
    let mut count = std::collections::HashMap::<u32, usize>::new();
    for &l in &ranked.labels {
        *count.entry(l).or_default() += 1;
    }
    let others = usize::from(t.gallery.is_none());
    ensure!(
        t.query.labels.iter().any(|l| count.get(l).is_some_and(|&c| c > others)),
        "{}: no test query has another item of its class {}, so Recall@k, MAP@R and NMI would be undefined: \
         each test class needs two items or more",
        t.query.name,
        if t.gallery.is_some() {
            "in the gallery"
        } else {
            "among the test items"
        }
    );
    Ok(gallery)
}

/// Reads the header of every image file of `set`.
pub fn files(set: &ImageSet) -> Result<()> {
    let Source::Files { paths, .. } = &*set.source else {
        return Ok(());
    };
    set.indices.par_iter().enumerate().try_for_each(|(pos, &i)| {
        let p = &paths[i];
        let (w, h) = crate::read::image(p)
            .with_context(|| format!("{}: item {pos}", set.name))?
            .into_dimensions()
            .with_context(|| {
                format!(
                    "{}: item {pos}: {}: corrupt or unsupported image",
                    set.name,
                    p.display()
                )
            })?;
        super::transform::check_dimensions(w, h).with_context(|| format!("{}: item {pos}: {}", set.name, p.display()))
    })
}
