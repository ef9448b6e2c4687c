//! The place of each relevant item in a row's order, for the full AP (`Σ_j j / rank_j`): the items
//! of the row before it in (distance, index) order, counted over the whole row or a block of it
//! at a time. Only the items at or below the last relevant distance can precede any; when they
//! are few they are gathered first. Then [`BLOCK`] relevant items share each pass over the keys,
//! each counting `≤` its distance before its own index and `<` after it (ties precede when their
//! index is lower).

use super::order::{key64, ordered};
use super::places::{SEARCH_FROM, by_search};
use std::borrow::Cow;

/// Relevant items counted per pass over the keys.
const BLOCK: usize = 8;

/// For each relevant item (keys `rel`, sorted by [`super::order::key_less`]), the items of the
/// row (less `skip`) before it, relevant ones included.
pub fn before_relevant(row: &[f32], rel: &[(f32, u32)], skip: Option<usize>) -> Vec<usize> {
    let rel: Vec<(i32, u32)> = rel.iter().map(|&(d, j)| (ordered(d), j)).collect();
    let mut before = vec![0usize; rel.len()];
    add_before(&mut before, &rel, row, 0, skip);
    before
}

/// Adds to `before[i]` the items `first..first + row.len()` (at distances `row`, less `skip`)
/// that come before the relevant item `rel[i]` (its distance in [`ordered`] form, its index).
pub fn add_before(before: &mut [usize], rel: &[(i32, u32)], row: &[f32], first: usize, skip: Option<usize>) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { add_before_avx512(before, rel, row, first, skip) };
    }
    add_before_in(before, rel, row, first, skip)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn add_before_avx512(before: &mut [usize], rel: &[(i32, u32)], row: &[f32], first: usize, skip: Option<usize>) {
    add_before_in(before, rel, row, first, skip)
}

/// Where a relevant item sits against a block of keys.
#[derive(Debug, Clone, Copy, PartialEq)]
enum At {
    /// Before the block: every key of it comes after the item's index.
    Before,
    /// At this position of the keys.
    Here(usize),
    /// After the block.
    After,
}

#[inline(always)]
fn add_before_in(before: &mut [usize], rel: &[(i32, u32)], row: &[f32], first: usize, skip: Option<usize>) {
    let Some(last) = rel.iter().map(|r| r.0).max() else {
        return;
    };
    let ords: Vec<i32> = row.iter().map(|&d| ordered(d)).collect();
    let m = match last.checked_add(1) {
        Some(t) => count_below(&ords, t),
        None => ords.len(),
    };
    // The keys that can precede a relevant item, and where each one sits in the row.
    let (keys, at): (Cow<[i32]>, Option<Vec<u32>>) = if 2 * m < ords.len() {
        let (k, i) = gather_at_most(&ords, last, m);
        (Cow::Owned(k), Some(i))
    } else {
        (Cow::Borrowed(&ords[..]), None)
    };
    let end = first + row.len();
    if rel.len() >= SEARCH_FROM {
        return by_search(before, rel, &keys, at.as_deref(), first..end, skip);
    }
    let items: Vec<(i32, At)> = rel
        .iter()
        .map(|&(t, j)| {
            let j = j as usize;
            let place = match j {
                _ if j < first => At::Before,
                _ if j >= end => At::After,
                _ => At::Here(
                    at.as_ref()
                        .map_or(j - first, |at| at.partition_point(|&p| (p as usize) < j - first)),
                ),
            };
            (t, place)
        })
        .collect();
    let counts = count_before(&keys, &items);
    // The skipped item was counted where it precedes.
    let skipped = skip
        .filter(|q| (first..end).contains(q))
        .map(|q| key64(row[q - first], q as u32));
    for ((b, c), &(t, j)) in before.iter_mut().zip(counts).zip(rel) {
        let key = (i64::from(t) << 32) | i64::from(j);
        *b += c - usize::from(skipped.is_some_and(|kq| kq < key));
    }
}

/// The keys at most `t` (`m` of them) and their positions, in row order.
#[inline(always)]
fn gather_at_most(ords: &[i32], t: i32, m: usize) -> (Vec<i32>, Vec<u32>) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { gather_at_most_avx512(ords, t, m) };
    }
    gather_at_most_portable(ords, t, m)
}

fn gather_at_most_portable(ords: &[i32], t: i32, m: usize) -> (Vec<i32>, Vec<u32>) {
    let (mut keys, mut at) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for (p, &k) in ords.iter().enumerate() {
        if k <= t {
            keys.push(k);
            at.push(p as u32);
        }
    }
    (keys, at)
}

/// [`gather_at_most`] by AVX-512's compress, 16 keys a step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gather_at_most_avx512(ords: &[i32], t: i32, m: usize) -> (Vec<i32>, Vec<u32>) {
    use std::arch::x86_64::*;
    // Each step stores 16 lanes at the write position; the room after the m kept is for them.
    let (mut keys, mut at) = (vec![0i32; m + 16], vec![0u32; m + 16]);
    let (tv, step) = (_mm512_set1_epi32(t), _mm512_set1_epi32(16));
    let mut pos = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let mut w = 0usize;
    let chunks = ords.chunks_exact(16);
    let rest_start = ords.len() - chunks.remainder().len();
    for c in chunks {
        // SAFETY: `c` holds 16 `i32`s; `w + 16 ≤ m + 16` because at most m keys are kept
        // in all, so both stores stay inside the vectors.
        unsafe {
            let v = _mm512_loadu_si512(c.as_ptr().cast());
            let keep = _mm512_cmple_epi32_mask(v, tv);
            _mm512_storeu_si512(keys.as_mut_ptr().add(w).cast(), _mm512_maskz_compress_epi32(keep, v));
            _mm512_storeu_si512(at.as_mut_ptr().add(w).cast(), _mm512_maskz_compress_epi32(keep, pos));
            w += keep.count_ones() as usize;
        }
        // A wrong m would let the next store run past the vectors: refuse rather than write.
        assert!(w <= m, "gather_at_most: more than m = {m} keys at most {t}");
        pos = _mm512_add_epi32(pos, step);
    }
    for (p, &k) in ords.iter().enumerate().skip(rest_start) {
        if k <= t {
            keys[w] = k;
            at[w] = p as u32;
            w += 1;
        }
    }
    keys.truncate(w);
    at.truncate(w);
    (keys, at)
}

/// For each item `(t, at)` of `items` (a key, and where the item sits), the keys before it in
/// (key, position) order, itself left out: `≤ t` before its position, `< t` after it.
#[inline(always)]
fn count_before(keys: &[i32], items: &[(i32, At)]) -> Vec<usize> {
    let mut out = vec![0usize; items.len()];
    // `≤ t` is `< t + 1`, but for the largest key, which is counted apart.
    let (mut order, top): (Vec<usize>, Vec<usize>) = (0..items.len()).partition(|&i| items[i].0 < i32::MAX);
    for i in top {
        out[i] = match items[i].1 {
            At::Before => count_below(keys, i32::MAX),
            At::Here(s) => s + count_below(&keys[s + 1..], i32::MAX),
            At::After => keys.len(),
        };
    }
    // By the position where each switches from `≤` to `<`.
    let switch = |at: At| match at {
        At::Before => 0,
        At::Here(s) => s + 1,
        At::After => usize::MAX,
    };
    order.sort_unstable_by_key(|&i| switch(items[i].1));
    for block in order.chunks(BLOCK) {
        // Slots without an item compare below i32::MIN: they count nothing.
        let mut cur = [i32::MIN; BLOCK];
        let mut acc = [0usize; BLOCK];
        for (slot, &i) in block.iter().enumerate() {
            let (t, at) = items[i];
            cur[slot] = if at == At::Before { t } else { t + 1 };
        }
        let mut start = 0;
        for (slot, &i) in block.iter().enumerate() {
            let (t, At::Here(s)) = items[i] else { continue };
            count_segment(&keys[start..s], &cur, &mut acc);
            // At position s: the other items compare as usual, this one leaves itself out.
            for (o, (&c, a)) in cur.iter().zip(acc.iter_mut()).enumerate() {
                *a += usize::from(o != slot && keys[s] < c);
            }
            cur[slot] = t;
            start = s + 1;
        }
        count_segment(&keys[start..], &cur, &mut acc);
        for (slot, &i) in block.iter().enumerate() {
            out[i] = acc[slot];
        }
    }
    out
}

/// Adds to `acc[b]` how many of `keys` are below `cur[b]`, for the [`BLOCK`] bounds at once.
#[inline(always)]
fn count_segment(keys: &[i32], cur: &[i32; BLOCK], acc: &mut [usize; BLOCK]) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { count_segment_avx512(keys, cur, acc) };
    }
    count_segment_portable(keys, cur, acc)
}

fn count_segment_portable(keys: &[i32], cur: &[i32; BLOCK], acc: &mut [usize; BLOCK]) {
    let chunks = keys.chunks_exact(16);
    let rest = chunks.remainder();
    let mut lanes = [[0u32; 16]; BLOCK];
    for c in chunks {
        for (l, &t) in lanes.iter_mut().zip(cur) {
            for (x, &k) in l.iter_mut().zip(c) {
                *x += u32::from(k < t);
            }
        }
    }
    for ((a, l), &t) in acc.iter_mut().zip(&lanes).zip(cur) {
        *a += l.iter().map(|&x| x as usize).sum::<usize>() + rest.iter().filter(|&&k| k < t).count();
    }
}

/// [`count_segment`] with AVX-512: each load of 16 keys is compared with every bound.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn count_segment_avx512(keys: &[i32], cur: &[i32; BLOCK], acc: &mut [usize; BLOCK]) {
    use std::arch::x86_64::*;
    let t = cur.map(|c| _mm512_set1_epi32(c));
    let one = _mm512_set1_epi32(1);
    let mut a = [_mm512_setzero_si512(); BLOCK];
    let chunks = keys.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` holds 16 `i32`s, one unaligned 512-bit load.
        let v = unsafe { _mm512_loadu_si512(c.as_ptr().cast()) };
        for (a, &t) in a.iter_mut().zip(&t) {
            *a = _mm512_mask_add_epi32(*a, _mm512_cmplt_epi32_mask(v, t), *a, one);
        }
    }
    for ((acc, a), &c) in acc.iter_mut().zip(a).zip(cur) {
        *acc += _mm512_reduce_add_epi32(a) as u32 as usize + rest.iter().filter(|&&k| k < c).count();
    }
}

/// How many of `xs` are below `t`: 16 lanes with AVX-512, else what the baseline target has.
pub fn count_below(xs: &[i32], t: i32) -> usize {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::avx512() {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { count_below_avx512(xs, t) };
    }
    count_below_lanes(xs, t)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn count_below_avx512(xs: &[i32], t: i32) -> usize {
    use std::arch::x86_64::*;
    let (tv, one) = (_mm512_set1_epi32(t), _mm512_set1_epi32(1));
    let mut acc = [_mm512_setzero_si512(); 4];
    let blocks = xs.chunks_exact(64);
    let rest = blocks.remainder();
    for b in blocks {
        for (a, c) in acc.iter_mut().zip(b.chunks_exact(16)) {
            // SAFETY: `c` holds 16 `i32`s, one unaligned 512-bit load.
            let v = unsafe { _mm512_loadu_si512(c.as_ptr().cast()) };
            *a = _mm512_mask_add_epi32(*a, _mm512_cmplt_epi32_mask(v, tv), *a, one);
        }
    }
    let sum = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
    _mm512_reduce_add_epi32(sum) as usize + count_below_lanes(rest, t)
}

#[inline(always)]
fn count_below_lanes(xs: &[i32], t: i32) -> usize {
    let mut lanes = [0u32; 16];
    let chunks = xs.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l += u32::from(x < t);
        }
    }
    lanes.iter().map(|&l| l as usize).sum::<usize>() + rest.iter().filter(|&&x| x < t).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::order::key_less;

    /// Each relevant item's count of items before it is its place in a full sort of the row
    /// (less the skipped item): rows with ties (few distinct values), signed zeros, NaN (the
    /// largest one too), few or many relevant items, gathered first or not.
    #[test]
    fn items_before_each_relevant_one_are_its_place_in_a_full_sort() {
        let mut x = 99u64;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for n in [1usize, 17, 40, 300, 1000] {
            let specials = [-0.0f32, 0.0, f32::NAN, f32::from_bits(0x7fff_ffff)];
            for spread in [20u64, 400] {
                let row: Vec<f32> = (0..n)
                    .map(|_| match next(spread) {
                        v @ 0..=3 => specials[v as usize],
                        v => v as f32,
                    })
                    .collect();
                for n_rel in [1usize, 3, 9, 64, n] {
                    let skip = (n > 1).then(|| next(n as u64) as usize);
                    // Near items only (the gathered way) or anywhere.
                    for near in [false, true] {
                        let mut rel: Vec<(f32, u32)> = (0..n as u32)
                            .filter(|&j| Some(j as usize) != skip)
                            .filter(|&j| !near || row[j as usize] < 6.0)
                            .filter(|_| next(n as u64) < n_rel as u64)
                            .map(|j| (row[j as usize], j))
                            .collect();
                        rel.sort_unstable_by(|a, b| key_less(*a, *b));
                        let mut all: Vec<(f32, u32)> = (0..n as u32)
                            .filter(|&j| Some(j as usize) != skip)
                            .map(|j| (row[j as usize], j))
                            .collect();
                        all.sort_unstable_by(|a, b| key_less(*a, *b));
                        let places: Vec<usize> = rel
                            .iter()
                            .map(|key| all.iter().position(|a| a.1 == key.1).unwrap())
                            .collect();
                        assert_eq!(
                            before_relevant(&row, &rel, skip),
                            places,
                            "n {n} relevant {}",
                            rel.len()
                        );
                        // In blocks, in any order.
                        let ords: Vec<(i32, u32)> = rel.iter().map(|&(d, j)| (ordered(d), j)).collect();
                        let mut by_blocks = vec![0usize; rel.len()];
                        let cut = n / 3;
                        add_before(&mut by_blocks, &ords, &row[cut..], cut, skip);
                        add_before_in(&mut by_blocks, &ords, &row[..cut], 0, skip);
                        assert_eq!(by_blocks, places, "in blocks");
                    }
                }
            }
        }
    }

    #[test]
    fn both_gathers_and_counts_agree() {
        let ords: Vec<i32> = (0..1000).map(|i| ((i * 7919) % 613) - 300).collect();
        for t in [-301, -5, 0, 312, i32::MAX] {
            let m = ords.iter().filter(|&&k| k <= t).count();
            let want: (Vec<i32>, Vec<u32>) = ords
                .iter()
                .enumerate()
                .filter(|&(_, &k)| k <= t)
                .map(|(p, &k)| (k, p as u32))
                .unzip();
            assert_eq!(gather_at_most(&ords, t, m), want);
            assert_eq!(gather_at_most_portable(&ords, t, m), want);
            let below = ords.iter().filter(|&&k| k < t).count();
            assert_eq!(count_below(&ords, t), below);
            assert_eq!(count_below_lanes(&ords, t), below);
            let (mut a, mut cur) = ([0usize; BLOCK], [i32::MIN; BLOCK]);
            cur[3] = t;
            count_segment_portable(&ords[..999], &cur, &mut a);
            assert_eq!(a[3], ords[..999].iter().filter(|&&k| k < t).count());
            assert_eq!(a.iter().sum::<usize>(), a[3]);
        }
    }
}
