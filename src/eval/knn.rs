//! Exact nearest-neighbour search in blocks: squared Euclidean distances of a tile of queries to
//! the whole gallery come from one matrix multiply (`‖q‖² + ‖g‖² − 2 q·g`), each row is reduced
//! by a caller-supplied function (partial top-k, rank counting), and the tile is dropped. Memory is
//! one tile plus the per-row results, never an N×N matrix.

use anyhow::{Result, ensure};
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;

pub use super::order::{key_less, top_k};

/// Row-major embeddings `n × dim` on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub data: Vec<f32>,
    pub n: usize,
    pub dim: usize,
}

impl Embeddings {
    pub fn new(data: Vec<f32>, n: usize, dim: usize) -> Result<Self> {
        ensure!(
            data.len() == n * dim,
            "embeddings: {} values for {n} × {dim}",
            data.len()
        );
        // The one door every embedding comes through (a model's, an attack's, a caller's): a NaN
        // or an infinity would rank as a number and score as one; a finite value so large that a
        // squared distance overflows single precision (‖a − b‖² up to 4·D·max²) makes every
        // distance infinite and every ranking a tie. One scan finds either.
        let limit = (f32::MAX / (4.0 * dim.max(1) as f32)).sqrt();
        if let Some(at) = data.iter().position(|v| !v.is_finite() || v.abs() > limit) {
            let (item, d, v) = (at / dim.max(1), at % dim.max(1), data[at]);
            return Err(crate::input_error(if v.is_finite() {
                format!(
                    "embeddings: item {item} holds {v:e} in dimension {d}, too large for distances in single \
                     precision (at most {limit:.1e} in {dim} dimensions): scale the embeddings down (or \
                     L2-normalise them)"
                )
            } else {
                format!(
                    "embeddings: item {item} holds a non-finite value ({v}) in dimension {d}: rdml scores finite \
                     embeddings only (a model whose values overflow or turn NaN on these images cannot be scored)"
                )
            }));
        }
        Ok(Self { data, n, dim })
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    /// Whether every row has unit L2 norm (to 1e-3).
    pub fn is_normalized(&self) -> bool {
        (0..self.n).all(|i| (self.row(i).iter().map(|v| v * v).sum::<f32>().sqrt() - 1.0).abs() < 1e-3)
    }
    fn sq_norms(&self) -> Vec<f32> {
        (0..self.n).map(|i| self.row(i).iter().map(|v| v * v).sum()).collect()
    }
}

/// Floats per tile: 32 Mi (128 MiB of distances).
const TILE_FLOATS: usize = 32 << 20;

/// Applies `reduce(query_index, distances_row)` to every query's row of squared distances to all
/// gallery items, tile by tile. `distances_row[j]` is the squared distance to gallery item `j`.
/// Rows are computed on `device` and reduced on the host in parallel.
pub fn scan_rows<T, F>(query: &Embeddings, gallery: &Embeddings, device: &Device, reduce: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(usize, &[f32]) -> T + Sync,
{
    ensure!(
        query.dim == gallery.dim,
        "query dim {} ≠ gallery dim {}",
        query.dim,
        gallery.dim
    );
    if query.n == 0 {
        return Ok(vec![]);
    }
    if device.clone().without_autodiff() == crate::default_device() {
        return Ok(scan_rows_host(query, gallery, TILE_FLOATS, reduce));
    }
    let g = Tensor::<2>::from_data(TensorData::new(gallery.data.clone(), [gallery.n, gallery.dim]), device);
    let gt = g.transpose();
    let g_norm = gallery.sq_norms();
    let q_norm = query.sq_norms();
    let tile = (TILE_FLOATS / gallery.n.max(1)).clamp(1, query.n);
    let mut out = Vec::with_capacity(query.n);
    for start in (0..query.n).step_by(tile) {
        let end = (start + tile).min(query.n);
        let q = Tensor::<2>::from_data(
            TensorData::new(
                query.data[start * query.dim..end * query.dim].to_vec(),
                [end - start, query.dim],
            ),
            device,
        );
        let mut dots: Vec<f32> = q
            .matmul(gt.clone())
            .try_into_data()
            .map_err(|e| anyhow::anyhow!("reading distances back from the device: {e}"))?
            .try_into_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let rows: Vec<T> = dots
            .par_chunks_mut(gallery.n)
            .enumerate()
            .map(|(r, row)| {
                let qi = start + r;
                dots_to_squared_distances(row, q_norm[qi], &g_norm);
                reduce(qi, row)
            })
            .collect();
        out.extend(rows);
    }
    Ok(out)
}

/// [`scan_rows`] on the CPU: the tile's dot products by `gemm` into one buffer that every tile
/// reuses (a fresh 128 MiB per tile costs its page faults, and burn's tensor two more copies).
fn scan_rows_host<T, F>(query: &Embeddings, gallery: &Embeddings, tile_floats: usize, reduce: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize, &[f32]) -> T + Sync,
{
    let (n, dim) = (gallery.n, gallery.dim);
    if n == 0 {
        return (0..query.n).map(|i| reduce(i, &[])).collect();
    }
    let g_norm = gallery.sq_norms();
    let q_norm = query.sq_norms();
    let tile = (tile_floats / n.max(1)).clamp(1, query.n);
    let mut dots = vec![0.0f32; tile * n];
    let mut out = Vec::with_capacity(query.n);
    for start in (0..query.n).step_by(tile) {
        let rows = tile.min(query.n - start);
        let q = &query.data[start * dim..(start + rows) * dim];
        let dst = &mut dots[..rows * n];
        // SAFETY: `q` is `rows × dim` and the gallery `n × dim`, both row-major and read as
        // such (`q` by (column, row) strides (1, dim), the gallery transposed by (dim, 1));
        // `dst` is `rows × n` and borrowed mutably, so nothing aliases it.
        unsafe {
            gemm::gemm(
                rows,
                n,
                dim,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                q.as_ptr(),
                1,
                dim as isize,
                gallery.data.as_ptr(),
                dim as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(rayon::current_num_threads()),
            );
        }
        let reduced: Vec<T> = dst
            .par_chunks_mut(n.max(1))
            .enumerate()
            .map(|(r, row)| {
                let qi = start + r;
                dots_to_squared_distances(row, q_norm[qi], &g_norm);
                reduce(qi, row)
            })
            .collect();
        out.extend(reduced);
    }
    out
}

/// A row of dot products `q·g` made squared distances `‖q‖² + ‖g‖² − 2 q·g` (at least 0).
fn dots_to_squared_distances(row: &mut [f32], q_norm: f32, g_norm: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { dots_to_squared_distances_avx512(row, q_norm, g_norm) };
    }
    dots_to_squared_distances_in(row, q_norm, g_norm)
}

/// [`dots_to_squared_distances_in`] vectorised 16 lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn dots_to_squared_distances_avx512(row: &mut [f32], q_norm: f32, g_norm: &[f32]) {
    dots_to_squared_distances_in(row, q_norm, g_norm)
}

#[inline(always)]
fn dots_to_squared_distances_in(row: &mut [f32], q_norm: f32, g_norm: &[f32]) {
    for (v, &g) in row.iter_mut().zip(g_norm) {
        *v = (q_norm + g - 2.0 * *v).max(0.0);
    }
}

/// The `k` nearest neighbours of every query (indices and squared distances), `n_q × k`.
/// With `exclude_self`, query `i` is gallery item `i` and is left out of its own list.
pub fn knn(
    query: &Embeddings,
    gallery: &Embeddings,
    k: usize,
    exclude_self: bool,
    device: &Device,
) -> Result<Vec<Vec<(f32, u32)>>> {
    scan_rows(query, gallery, device, |i, row| {
        top_k(row, k, exclude_self.then_some(i))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every embedding comes through one door, which refuses a NaN or an infinity (a model whose
    /// finite weights overflow on the images: every score would be a number that looks real).
    #[test]
    fn non_finite_embeddings_never_pass() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let e = Embeddings::new(vec![0.0, 1.0, 2.0, bad], 2, 2).unwrap_err();
            assert!(e.chain().any(|c| c.is::<crate::InputError>()));
            let e = format!("{e:#}");
            assert!(
                e.starts_with(&format!(
                    "embeddings: item 1 holds a non-finite value ({bad}) in dimension 1"
                )),
                "{e}"
            );
        }
        // Finite, but its squared distances overflow single precision.
        let e = format!("{:#}", Embeddings::new(vec![0.0, 1e20, 2.0, 3.0], 2, 2).unwrap_err());
        assert!(
            e.contains("item 0 holds 1e20 in dimension 1, too large for distances"),
            "{e}"
        );
        assert!(Embeddings::new(vec![0.0, 1e15, 2.0, 3.0], 2, 2).is_ok());
    }

    #[test]
    fn knn_matches_brute_force_with_ties() {
        let dev = Device::default();
        // Points on a line: 0, 1, 1, 3 (items 1 and 2 tie).
        let e = Embeddings::new(vec![0.0, 1.0, 1.0, 3.0], 4, 1).unwrap();
        let nn = knn(&e, &e, 2, true, &dev).unwrap();
        assert_eq!(nn[0].iter().map(|x| x.1).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(nn[1].iter().map(|x| x.1).collect::<Vec<_>>(), vec![2, 0]);
        assert_eq!(nn[3].iter().map(|x| x.1).collect::<Vec<_>>(), vec![1, 2]);
        assert!((nn[3][0].0 - 4.0).abs() < 1e-5);
    }

    /// The CPU's blocked product gives each row's squared distances, tile after tile (here 3
    /// rows a tile, the last one short) in one reused buffer.
    #[test]
    fn host_rows_are_the_squared_distances() {
        let mut x = 7u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) % 1000) as f32 / 500.0 - 1.0
        };
        let (nq, ng, dim) = (8, 11, 5);
        let q = Embeddings::new((0..nq * dim).map(|_| next()).collect(), nq, dim).unwrap();
        let g = Embeddings::new((0..ng * dim).map(|_| next()).collect(), ng, dim).unwrap();
        let rows = scan_rows_host(&q, &g, 3 * ng, |i, row| (i, row.to_vec()));
        assert_eq!(rows.len(), nq);
        let empty = Embeddings::new(vec![], 0, dim).unwrap();
        assert_eq!(
            scan_rows_host(&q, &empty, 3, |i, row| (i, row.len())),
            (0..nq).map(|i| (i, 0)).collect::<Vec<_>>()
        );
        for (r, (i, row)) in rows.iter().enumerate() {
            assert_eq!(*i, r);
            for (j, &d) in row.iter().enumerate() {
                let exact: f32 = q.row(r).iter().zip(g.row(j)).map(|(a, b)| (a - b) * (a - b)).sum();
                assert!((d - exact).abs() < 1e-5, "({r}, {j}): {d} vs {exact}");
            }
        }
    }
}
