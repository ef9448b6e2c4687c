//! k-means' assignment step: each point's nearest centre. On the CPU with AVX-512 the squared
//! distances of a block of points are made by [`crate::kernel::dots`] and read while in cache;
//! elsewhere rows are scanned.

use super::knn::{Embeddings, scan_rows};
use anyhow::Result;
use burn::tensor::Device;
use rayon::prelude::*;

/// Each row's squared norm (rows of `dim` values), summed 16 lanes wide.
pub(super) fn squared_norms(data: &[f32], dim: usize) -> Vec<f32> {
    data.par_chunks(dim.max(1))
        .map(|r| {
            let mut lanes = [0f32; 16];
            let chunks = r.chunks_exact(16);
            let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
            for c in chunks {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += v * v;
                }
            }
            lanes.iter().sum::<f32>() + tail
        })
        .collect()
}

/// Each point's nearest centre (the first of equals); `xn`: the points' squared norms.
pub(super) fn nearest(x: &Embeddings, xn: &[f32], centres: &[f32], k: usize, device: &Device) -> Result<Vec<u32>> {
    if device.clone().without_autodiff() == crate::default_device() && crate::kernel::dots::available() && x.dim > 0 {
        return Ok(nearest_in_cache(x, xn, centres, k));
    }
    let cent = Embeddings::new(centres.to_vec(), k, x.dim)?;
    scan_rows(x, &cent, device, |_, row| argmin(row))
}

/// The first index of the smallest value (0 when the first is NaN, as a scan keeping the first
/// smaller value finds it): the minimum by a vectorised fold, then its first place.
fn argmin(row: &[f32]) -> u32 {
    if row.first().is_none_or(|v| v.is_nan()) {
        return 0;
    }
    let m = row.iter().copied().fold(f32::INFINITY, f32::min);
    let chunks = row.chunks_exact(16);
    let tail = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        let lanes = chunk
            .iter()
            .enumerate()
            .fold(0u32, |l, (i, &v)| l | (u32::from(v == m) << i));
        if lanes != 0 {
            return (c * 16) as u32 + lanes.trailing_zeros();
        }
    }
    let start = row.len() - tail.len();
    tail.iter().position(|&v| v == m).map_or(0, |p| (start + p) as u32)
}

/// Points a block of rows per task (their distances to every centre about 1 MiB: in L2).
const NEAREST_BYTES: usize = 1 << 20;

/// [`nearest`] on the CPU by [`crate::kernel::dots`]: the centres packed once, each block of
/// points' squared distances made and read while in cache, no distance matrix in memory.
fn nearest_in_cache(x: &Embeddings, xn: &[f32], centres: &[f32], k: usize) -> Vec<u32> {
    use crate::kernel::dots::{Finish, Packed, dots_packed};
    let d = x.dim;
    let cn = squared_norms(centres, d);
    let packed = Packed::new(centres, d);
    let rows = (NEAREST_BYTES / (4 * k)).clamp(6, 384);
    let mut assign = vec![0u32; x.n];
    assign
        .par_chunks_mut(rows)
        .zip(x.data.par_chunks(rows * d))
        .enumerate()
        .for_each_init(Vec::new, |out, (c, (nearest, xs))| {
            let n = xs.len() / d;
            out.resize(n * k, 0.0);
            let finish = Finish::Squared {
                a: &xn[c * rows..c * rows + n],
                b: &cn,
            };
            dots_packed(xs, &packed, out, k, finish);
            for (slot, row) in nearest.iter_mut().zip(out.chunks(k)) {
                *slot = argmin(row);
            }
        });
    assign
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmin_is_the_first_smallest() {
        for (row, want) in [
            (vec![3.0, 1.0, 1.0, 2.0], 1),
            (vec![f32::NAN, 0.0, -1.0], 0),
            (vec![5.0, f32::NAN, 4.0], 2),
            (vec![f32::INFINITY; 3], 0),
            (vec![], 0),
        ] {
            assert_eq!(argmin(&row), want, "{row:?}");
        }
        let long: Vec<f32> = (0..100).map(|i| ((i * 37) % 41) as f32).collect();
        let first = long.iter().position(|&v| v == 0.0).unwrap() as u32;
        assert_eq!(argmin(&long), first);
    }

    /// The CPU's in-cache assignment is the scan's, on points whose nearest centre is clear.
    #[test]
    fn nearest_in_cache_is_the_scan() {
        if !crate::kernel::dots::available() {
            return;
        }
        let (n, k, d) = (301, 17, 20);
        let v = |i: usize| ((i * 7919) % 1009) as f32 / 1009.0 - 0.5;
        let x = Embeddings::new((0..n * d).map(v).collect(), n, d).unwrap();
        let centres: Vec<f32> = (0..k * d).map(|i| v(i + 5 * n * d)).collect();
        let cent = Embeddings::new(centres.clone(), k, d).unwrap();
        let scan = scan_rows(&x, &cent, &crate::default_device(), |_, row| argmin(row)).unwrap();
        assert_eq!(nearest_in_cache(&x, &squared_norms(&x.data, x.dim), &centres, k), scan);
    }
}
