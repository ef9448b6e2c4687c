//! Each key's place among many relevant items (classes of hundreds), for the full AP's counts
//! ([`super::before`]): a branchless binary search, 16 keys a step with AVX-512 gathers, then
//! a histogram of places and its running sums.

/// From this many relevant items, each key finds its place among them by a binary search
/// rather than being compared with each (a few a pass, [`super::before`]).
pub(super) const SEARCH_FROM: usize = 256;

/// [`super::before::add_before`] for many relevant items: each key's place among them (how many come before
/// it: those at a smaller distance, then those at its distance with a smaller index), a
/// histogram of places, and its running sums. `keys` are the block's (`at`: their positions
/// when gathered), `block` the indices of the block.
pub(super) fn by_search(
    before: &mut [usize],
    rel: &[(i32, u32)],
    keys: &[i32],
    at: Option<&[u32]>,
    block: std::ops::Range<usize>,
    skip: Option<usize>,
) {
    let r = rel.len();
    let t: Vec<i32> = rel.iter().map(|x| x.0).collect();
    let mut places = vec![0u32; keys.len()];
    lower_bounds(&t, keys, &mut places);
    let mut hist = vec![0usize; r + 1];
    for (p, (&key, &lo)) in keys.iter().zip(&places).enumerate() {
        let q = block.start + at.map_or(p, |a| a[p] as usize);
        if Some(q) == skip {
            continue;
        }
        let mut b = lo as usize;
        while b < r && t[b] == key && (rel[b].1 as usize) < q {
            b += 1;
        }
        hist[b] += 1;
    }
    // Keys placed at or before j precede item j, but j itself.
    let mut cum = 0;
    for (j, (b, &(_, idx))) in before.iter_mut().zip(rel).enumerate() {
        cum += hist[j];
        *b += cum - usize::from(block.contains(&(idx as usize)));
    }
}

/// `out[p]`: how many of the sorted `t` are below `keys[p]`; 16 keys a step with AVX-512.
fn lower_bounds(t: &[i32], keys: &[i32], out: &mut [u32]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() && !t.is_empty() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        done = unsafe { lower_bounds_avx512(t, keys, out) };
    }
    for (o, &x) in out[done..].iter_mut().zip(&keys[done..]) {
        *o = t.partition_point(|&v| v < x) as u32;
    }
}

/// [`lower_bounds`] for the keys in whole steps of 16: a branchless binary search whose probes
/// are gathers; returns how many keys it placed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn lower_bounds_avx512(t: &[i32], keys: &[i32], out: &mut [u32]) -> usize {
    use std::arch::x86_64::*;
    if t.is_empty() {
        return 0;
    }
    let one = _mm512_set1_epi32(1);
    for (chunk, o) in keys.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
        // SAFETY: 16 values each; every probe index is below t.len() (base + half < base + n
        // ≤ t.len() while n > 1, then base ≤ t.len() − 1).
        unsafe {
            let x = _mm512_loadu_si512(chunk.as_ptr().cast());
            let (mut base, mut n) = (_mm512_setzero_si512(), t.len());
            while n > 1 {
                let half = n / 2;
                let idx = _mm512_add_epi32(base, _mm512_set1_epi32(half as i32));
                let probe = _mm512_i32gather_epi32::<4>(idx, t.as_ptr());
                base = _mm512_mask_mov_epi32(base, _mm512_cmplt_epi32_mask(probe, x), idx);
                n -= half;
            }
            let probe = _mm512_i32gather_epi32::<4>(base, t.as_ptr());
            base = _mm512_mask_add_epi32(base, _mm512_cmplt_epi32_mask(probe, x), base, one);
            _mm512_storeu_si512(o.as_mut_ptr().cast(), base);
        }
    }
    keys.len() / 16 * 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_bounds_are_partition_points() {
        let t: Vec<i32> = vec![-5, -5, 0, 3, 3, 3, 9, 100, i32::MAX];
        let keys: Vec<i32> = (-7..120).chain([i32::MIN, i32::MAX]).collect();
        let mut out = vec![0; keys.len()];
        lower_bounds(&t, &keys, &mut out);
        for (&k, &o) in keys.iter().zip(&out) {
            assert_eq!(o as usize, t.partition_point(|&v| v < k), "key {k}");
        }
    }
}
