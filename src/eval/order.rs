//! The order of a row of distances to gallery items: by distance in `f32::total_cmp`'s order,
//! ties by index, so that every run ranks alike; as integers ([`ordered`], [`key64`]) for passes
//! that compare many items at once; and the `k` nearest items under it ([`top_k`]).

/// Orders gallery items by (distance, index), so that ties break the same way every run.
#[inline]
pub fn key_less(a: (f32, u32), b: (f32, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// `f32::total_cmp`'s order as an integer.
#[inline(always)]
pub fn ordered(d: f32) -> i32 {
    let b = d.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// [`key_less`]'s order as one integer: the distance's total order, then the index.
#[inline(always)]
pub fn key64(d: f32, j: u32) -> i64 {
    (i64::from(ordered(d)) << 32) | i64::from(j)
}

/// The distance of a [`key64`].
#[inline]
fn distance_of(key: i64) -> f32 {
    let o = (key >> 32) as i32;
    f32::from_bits((o ^ (((o >> 31) as u32) >> 1) as i32) as u32)
}

/// The `k` nearest gallery items of a row, nearest first, leaving out `skip`.
pub fn top_k(row: &[f32], k: usize, skip: Option<usize>) -> Vec<(f32, u32)> {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { top_k_avx512(row, k, skip) };
    }
    top_k_in(row, k, skip)
}

/// [`top_k_in`] compiled for AVX-512, where its chunk test takes one compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn top_k_avx512(row: &[f32], k: usize, skip: Option<usize>) -> Vec<(f32, u32)> {
    top_k_in(row, k, skip)
}

/// Candidates as [`key64`]s in an unsorted buffer, cut back to the `k` best by a selection
/// whenever it fills; a chunk of 16 items with no distance below the k-th best so far is
/// rejected by one vectorised test. Items come in index order, so a later item with the k-th's
/// distance ranks after it: only a smaller distance enters.
#[inline(always)]
fn top_k_in(row: &[f32], k: usize, skip: Option<usize>) -> Vec<(f32, u32)> {
    if k == 0 {
        return vec![];
    }
    let cap = (4 * k).max(64);
    let mut buf: Vec<i64> = Vec::with_capacity(cap + 16);
    // Items enter while their distance's `ordered` form is below `bound` (i32::MAX: all but
    // the largest NaN, which is compared exactly below).
    let mut bound = i32::MAX;
    let mut full = false;
    let chunks = row.chunks_exact(16);
    let tail = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        let chunk: &[f32; 16] = chunk.try_into().unwrap_or(&[0.0; 16]);
        if full {
            // Lane i of `below` set: item i may enter.
            let below = chunk
                .iter()
                .enumerate()
                .fold(0u32, |m, (i, &d)| m | (u32::from(ordered(d) < bound) << i));
            push_lanes(&mut buf, chunk, c * 16, skip, below);
        } else {
            push_chunk(&mut buf, chunk, c * 16, skip, bound, full);
        }
        if buf.len() >= cap {
            bound = cut(&mut buf, k);
            full = true;
        }
    }
    push_chunk(&mut buf, tail, row.len() - tail.len(), skip, bound, full);
    if buf.len() > k {
        buf.select_nth_unstable(k - 1);
        buf.truncate(k);
    }
    buf.sort_unstable();
    buf.iter().map(|&key| (distance_of(key), key as u32)).collect()
}

/// Pushes the items of `chunk` (first index `start`) that may enter: all while the buffer has
/// not been cut, then those below `bound`.
#[inline(always)]
fn push_chunk(buf: &mut Vec<i64>, chunk: &[f32], start: usize, skip: Option<usize>, bound: i32, full: bool) {
    for (i, &d) in chunk.iter().enumerate() {
        let j = start + i;
        if (!full || ordered(d) < bound) && Some(j) != skip {
            buf.push(key64(d, j as u32));
        }
    }
}

/// Pushes the items of `chunk` (first index `start`) whose lanes are set in `lanes`.
#[inline(always)]
fn push_lanes(buf: &mut Vec<i64>, chunk: &[f32; 16], start: usize, skip: Option<usize>, mut lanes: u32) {
    while lanes != 0 {
        let i = lanes.trailing_zeros() as usize;
        lanes &= lanes - 1;
        let j = start + i;
        if Some(j) != skip {
            buf.push(key64(chunk[i], j as u32));
        }
    }
}

/// Keeps the `k` smallest keys of `buf` (in any order); returns the `ordered` distance of the
/// largest kept, which a later item must go below.
fn cut(buf: &mut Vec<i64>, k: usize) -> i32 {
    buf.select_nth_unstable(k - 1);
    buf.truncate(k);
    (buf[k - 1] >> 32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is the full sort's first `k`, ties broken by index, with and without a skipped
    /// item, for k below, at and above the row's length, with signed zeros, NaN and infinities.
    #[test]
    fn top_k_is_the_full_sort_s_head() {
        let mut x = 12345u64;
        for n in [1usize, 7, 300, 5000] {
            // Few distinct values, so that ties are common.
            let specials = [-0.0f32, 0.0, f32::NAN, f32::INFINITY, f32::from_bits(u32::MAX)];
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    match (x >> 40) % 17 {
                        v @ 0..=4 => specials[v as usize],
                        v => v as f32,
                    }
                })
                .collect();
            for k in [0, 1, 5, 40, n, n + 3] {
                for skip in [None, Some(0), Some(n / 2)] {
                    let mut all: Vec<(f32, u32)> = row
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| Some(j) != skip)
                        .map(|(j, &d)| (d, j as u32))
                        .collect();
                    all.sort_unstable_by(|a, b| key_less(*a, *b));
                    all.truncate(k);
                    let got = top_k(&row, k, skip);
                    let bits = |v: &[(f32, u32)]| v.iter().map(|&(d, j)| (d.to_bits(), j)).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&all), "n {n} k {k} skip {skip:?}");
                    assert_eq!(bits(&top_k_in(&row, k, skip)), bits(&all));
                }
            }
        }
    }
}
