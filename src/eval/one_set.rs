//! Retrieval of a set among itself (each item a query among the others) with each pair's distance
//! computed once: the set in blocks of rows, the products of each pair of blocks `I ≤ J` by
//! [`crate::kernel::dots`], read as rows of `I` and, transposed, as rows of `J`. Every row keeps
//! its nearest items ([`TopK`]) and, for each item of its class, how many items come before it
//! ([`add_before`]), fed block by block. Those counts compare with the row's distances to its
//! class, taken first from the class's own products: as the kernel gives a pair the same value
//! wherever it computes it, they are the values the blocks give.

use super::before::add_before;
use super::knn::Embeddings;
use super::order::{TopK, ordered};
use crate::kernel::dots::{Finish, Packed, dots_packed};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::Range;

/// Rows per block: a pair of blocks' products is 16 MiB.
const BLOCK_ROWS: usize = 2048;
/// The most the rows' state may take (their nearest items and counts), in bytes.
const STATE_BYTES: usize = 768 << 20;

/// One query's results: its `k` nearest others, nearest first, and for each other item of its
/// class (sorted by distance, then index) the items before it.
pub struct RowResult {
    pub top: Vec<(f32, u32)>,
    pub before: Vec<usize>,
}

/// A row's relevant items: distance in [`ordered`] form and index, sorted.
type Relevant = Vec<(i32, u32)>;

/// A row's state while blocks pass.
struct Row {
    top: TopK,
    /// Its class's other items.
    rel: Relevant,
    before: Vec<usize>,
}

/// The results of every item of `x` among the others, each keeping its `k(r)` nearest (`r`: the
/// size of its class less itself); `None` where this path does not run (no AVX-512, a class
/// over a block, rows' state over [`STATE_BYTES`], no dimensions): the caller scans rows
/// instead.
pub fn one_set(x: &Embeddings, labels: &[u32], k: impl Fn(usize) -> usize) -> Option<Vec<RowResult>> {
    if !crate::kernel::dots::available() || x.n < 2 || x.dim == 0 || labels.len() != x.n {
        return None;
    }
    let mut members: HashMap<u32, Vec<u32>> = HashMap::new();
    for (j, &l) in labels.iter().enumerate() {
        members.entry(l).or_default().push(j as u32);
    }
    let r_of = |i: usize| members[&labels[i]].len() - 1;
    let state: usize = (0..x.n)
        .map(|i| {
            let (r, k) = (r_of(i), k(r_of(i)));
            r * 16 + (k + (k / 2).max(32)) * 8
        })
        .sum();
    if state > STATE_BYTES || members.values().any(|m| m.len() > BLOCK_ROWS) {
        return None;
    }
    let norms: Vec<f32> = (0..x.n).map(|i| x.row(i).iter().map(|v| v * v).sum()).collect();
    let mut rows: Vec<Row> = (0..x.n)
        .map(|i| Row {
            top: TopK::new(k(r_of(i))),
            rel: vec![],
            before: vec![0; r_of(i)],
        })
        .collect();
    class_distances(x, &norms, &members, &mut rows);
    let blocks: Vec<Range<usize>> = (0..x.n)
        .step_by(BLOCK_ROWS)
        .map(|s| s..(s + BLOCK_ROWS).min(x.n))
        .collect();
    let mut prod = vec![0.0f32; BLOCK_ROWS * BLOCK_ROWS.min(x.n)];
    for (b, cols) in blocks.iter().enumerate() {
        let packed = Packed::new(&x.data[cols.start * x.dim..cols.end * x.dim], x.dim);
        for rows_i in &blocks[..=b] {
            let prod = &mut prod[..rows_i.len() * cols.len()];
            pair(x, &norms, (rows_i.clone(), cols.clone()), &packed, prod, &mut rows);
        }
    }
    Some(
        rows.into_iter()
            .map(|r| RowResult {
                top: r.top.finish(),
                before: r.before,
            })
            .collect(),
    )
}

/// Rows per task (at most) of a block's products, updated while the products are in cache.
const CHUNK: usize = 192;
/// Rows of the other block per task, their distances transposed in cache (16: one tile of
/// [`columns`]).
const STRIP: usize = 16;

/// Columns `c0..c0 + w` of `m` (rows of `nj`) as the rows of `out` (`w` rows of `rows(m)`),
/// `w ≤ 16`: 16 × 16 tiles transposed in registers, the edges one value at a time.
fn columns(m: &[f32], nj: usize, c0: usize, out: &mut [f32]) {
    let ni = m.len() / nj;
    let w = out.len() / ni.max(1);
    assert!(w <= 16 && c0 + w <= nj, "columns {c0}..{} of {nj}", c0 + w);
    let mut r0 = 0;
    #[cfg(target_arch = "x86_64")]
    if w == 16 && crate::kernel::avx512() {
        while r0 + 16 <= ni {
            // SAFETY: the CPU has AVX-512F; rows r0..r0 + 16 and columns c0..c0 + 16 are in `m`,
            // and out's rows hold ni ≥ r0 + 16 values.
            unsafe { tile16(m, nj, (r0, c0), out, ni) };
            r0 += 16;
        }
    }
    for r in r0..ni {
        for (c, &v) in m[r * nj + c0..r * nj + c0 + w].iter().enumerate() {
            out[c * ni + r] = v;
        }
    }
}

/// `out[c · ldo + r0 + i] = m[(r0 + i) · nj + c0 + c]` for i, c < 16: four rounds of shuffles
/// (32-bit, 64-bit and twice 128-bit interleaves) leave register c holding column c.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile16(m: &[f32], nj: usize, (r0, c0): (usize, usize), out: &mut [f32], ldo: usize) {
    use std::arch::x86_64::*;
    // SAFETY (loads and stores): inside `m` and `out` by the caller's bounds.
    let mut r: [__m512; 16] = std::array::from_fn(|i| unsafe { _mm512_loadu_ps(m.as_ptr().add((r0 + i) * nj + c0)) });
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for i in 0..4 {
        r[4 * i] = _mm512_shuffle_ps::<0x44>(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_shuffle_ps::<0xEE>(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_shuffle_ps::<0x44>(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_shuffle_ps::<0xEE>(t[4 * i + 1], t[4 * i + 3]);
    }
    for i in 0..2 {
        for j in 0..4 {
            t[8 * i + j] = _mm512_shuffle_f32x4::<0x88>(r[8 * i + j], r[8 * i + 4 + j]);
            t[8 * i + 4 + j] = _mm512_shuffle_f32x4::<0xDD>(r[8 * i + j], r[8 * i + 4 + j]);
        }
    }
    for j in 0..8 {
        r[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]);
        r[8 + j] = _mm512_shuffle_f32x4::<0xDD>(t[j], t[8 + j]);
    }
    for (c, &v) in r.iter().enumerate() {
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * ldo + r0), v) };
    }
}

/// The pair of blocks `(rows_i, cols)` (`cols` packed): the squared distances `prod`, read by
/// the rows of `rows_i` as they come and then, a strip of columns at a time, by those of `cols`.
fn pair(
    x: &Embeddings,
    norms: &[f32],
    (rows_i, cols): (Range<usize>, Range<usize>),
    packed: &Packed,
    prod: &mut [f32],
    rows: &mut [Row],
) {
    let (d, ni, nj) = (x.dim, rows_i.len(), cols.len());
    let own = rows_i == cols;
    // Tasks of at most CHUNK rows, as many for each thread.
    let threads = rayon::current_num_threads().max(1);
    let chunk = ni.div_ceil(threads * ni.div_ceil(threads * CHUNK)).max(1);
    prod.par_chunks_mut(chunk * nj)
        .zip(rows[rows_i.clone()].par_chunks_mut(chunk))
        .enumerate()
        .for_each(|(c, (out, states))| {
            let r0 = rows_i.start + c * chunk;
            let r1 = r0 + states.len();
            let finish = Finish::Squared {
                a: &norms[r0..r1],
                b: &norms[cols.clone()],
            };
            dots_packed(&x.data[r0 * d..r1 * d], packed, out, nj, finish);
            for (a, (row, dist)) in states.iter_mut().zip(out.chunks(nj)).enumerate() {
                row.absorb(dist, cols.start, own.then_some(r0 + a));
            }
        });
    if own {
        return;
    }
    let prod = &*prod;
    rows[cols].par_chunks_mut(STRIP).enumerate().for_each(|(s, states)| {
        let c0 = s * STRIP;
        let mut strip = vec![0.0f32; states.len() * ni];
        columns(prod, nj, c0, &mut strip);
        for (row, dist) in states.iter_mut().zip(strip.chunks(ni)) {
            row.absorb(dist, rows_i.start, None);
        }
    });
}

impl Row {
    /// Takes the distances `d` to items `first..` (leaving out `own`, the row's own item).
    fn absorb(&mut self, d: &[f32], first: usize, own: Option<usize>) {
        self.top.push(d, first, own);
        if !self.rel.is_empty() {
            add_before(&mut self.before, &self.rel, d, first, own);
        }
    }
}

/// Each row's distances to the other items of its class, from the class's own products.
fn class_distances(x: &Embeddings, norms: &[f32], members: &HashMap<u32, Vec<u32>>, rows: &mut [Row]) {
    let d = x.dim;
    let classes: Vec<&Vec<u32>> = members.values().filter(|m| m.len() > 1).collect();
    let rel: Vec<Vec<(u32, Relevant)>> = classes
        .par_iter()
        .map(|m| {
            let c = m.len();
            let rows: Vec<f32> = m.iter().flat_map(|&i| x.row(i as usize).iter().copied()).collect();
            let n: Vec<f32> = m.iter().map(|&i| norms[i as usize]).collect();
            let mut dist = vec![0.0f32; c * c];
            dots_packed(
                &rows,
                &Packed::new(&rows, d),
                &mut dist,
                c,
                Finish::Squared { a: &n, b: &n },
            );
            (0..c)
                .map(|a| {
                    let mut rel: Vec<(i32, u32)> = (0..c)
                        .filter(|&b| b != a)
                        .map(|b| (ordered(dist[a * c + b]), m[b]))
                        .collect();
                    rel.sort_unstable();
                    (m[a], rel)
                })
                .collect()
        })
        .collect();
    for (i, r) in rel.into_iter().flatten() {
        rows[i as usize].rel = r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::before::before_relevant;
    use crate::eval::order::{key_less, top_k};
    use crate::kernel::dots::squared;

    #[test]
    fn columns_are_the_transpose() {
        let (ni, nj) = (37, 50);
        let m: Vec<f32> = (0..ni * nj).map(|i| i as f32).collect();
        for (c0, w) in [(0, 16), (16, 16), (34, 16), (48, 2)] {
            let mut out = vec![0.0; w * ni];
            columns(&m, nj, c0, &mut out);
            for c in 0..w {
                for r in 0..ni {
                    assert_eq!(out[c * ni + r], m[r * nj + c0 + c], "({r}, {c}) of {c0}+{w}");
                }
            }
        }
    }

    /// The results equal a row-by-row scan over the same distances (each pair's product as the
    /// kernel computes it), with duplicate items for ties, over several blocks.
    #[test]
    fn each_row_equals_its_scan() {
        if !crate::kernel::dots::available() {
            return;
        }
        let (n, d) = (BLOCK_ROWS + 700, 5);
        let mut s = 5u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) % 7) as f32 / 7.0
        };
        let mut data: Vec<f32> = (0..n * d).map(|_| next()).collect();
        // Item 10 twice more, far apart (ties across blocks).
        let ten = data[10 * d..11 * d].to_vec();
        data[(n - 3) * d..(n - 2) * d].copy_from_slice(&ten);
        data[777 * d..778 * d].copy_from_slice(&ten);
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 7) % 300).collect();
        let x = Embeddings::new(data, n, d).unwrap();
        let k = |r: usize| r.max(10);
        let got = one_set(&x, &labels, k).unwrap();
        let norms: Vec<f32> = (0..n).map(|i| x.row(i).iter().map(|v| v * v).sum()).collect();
        for i in [0usize, 10, 777, 2100, n - 3, n - 1] {
            let row: Vec<f32> = (0..n)
                .map(|j| squared(norms[i], norms[j], crate::kernel::dots::dot_chain(x.row(i), x.row(j))))
                .collect();
            let r = labels.iter().filter(|&&l| l == labels[i]).count() - 1;
            assert_eq!(got[i].top, top_k(&row, k(r), Some(i)), "row {i}");
            let mut rel: Vec<(f32, u32)> = (0..n)
                .filter(|&j| j != i && labels[j] == labels[i])
                .map(|j| (row[j], j as u32))
                .collect();
            rel.sort_unstable_by(|a, b| key_less(*a, *b));
            assert_eq!(got[i].before, before_relevant(&row, &rel, Some(i)), "row {i}");
        }
    }
}
