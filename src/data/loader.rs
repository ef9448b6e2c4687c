//! Batch assembly: items decoded in parallel (rayon), and a prefetching iterator that prepares the
//! next batches on a background thread while the current one trains.

use super::set::ImageSet;
use anyhow::Result;
use rayon::prelude::*;
use std::sync::mpsc;

/// A batch of images `[b, c, h, w]` in [0, 1] with labels, on the host.
#[derive(Debug, Clone)]
pub struct HostBatch {
    pub images: Vec<f32>,
    pub shape: [usize; 4],
    pub labels: Vec<u32>,
    /// Positions of the items in their set.
    pub positions: Vec<usize>,
}

/// Loads the items at `positions`; with `augment = Some(seed)`, item `j` is augmented with a
/// generator seeded from `(seed, position)`, so augmentation does not depend on thread timing.
pub fn load_batch(set: &ImageSet, positions: &[usize], augment: Option<u64>) -> Result<HostBatch> {
    let [c, h, w] = set.item_shape();
    let n = c * h * w;
    let mut images = vec![0f32; positions.len() * n];
    images
        .par_chunks_mut(n)
        .zip(positions.par_iter().enumerate())
        .try_for_each(|(out, (j, &p))| {
            let seed = augment.map(|s| {
                s.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(j as u64 * 7919 + p as u64)
            });
            set.load_into(p, seed, out)
        })?;
    Ok(HostBatch {
        images,
        shape: [positions.len(), c, h, w],
        labels: positions.iter().map(|&p| set.labels[p]).collect(),
        positions: positions.to_vec(),
    })
}

/// Iterates over `batches`, loading up to `ahead` batches in advance on a background thread.
pub fn prefetch(
    set: ImageSet,
    batches: Vec<Vec<usize>>,
    augment: Option<u64>,
    ahead: usize,
) -> impl Iterator<Item = Result<HostBatch>> {
    let (tx, rx) = mpsc::sync_channel(ahead.max(1));
    std::thread::spawn(move || {
        for (i, b) in batches.iter().enumerate() {
            let r = load_batch(&set, b, augment.map(|s| s.wrapping_add(i as u64)));
            let stop = r.is_err();
            if tx.send(r).is_err() || stop {
                break;
            }
        }
    });
    rx.into_iter()
}

/// Consecutive positions `0..len` in chunks of `batch`, for embedding a whole set.
pub fn sequential(len: usize, batch: usize) -> Vec<Vec<usize>> {
    (0..len)
        .collect::<Vec<_>>()
        .chunks(batch.max(1))
        .map(|c| c.to_vec())
        .collect()
}
