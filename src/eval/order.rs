//! The order of a row of distances to gallery items: by distance in `f32::total_cmp`'s order,
//! ties by index, so that every run ranks alike; as integers ([`ordered`], [`key64`]) for passes
//! that compare many items at once; and the `k` nearest items under it ([`top_k`], [`TopK`]).

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
    let mut top = TopK::new(k);
    top.push(row, 0, skip);
    top.finish()
}

/// The `k` nearest of items given a block of distances at a time, blocks in any order: their
/// [`key64`]s in an unsorted buffer, cut back to the `k` best by a selection whenever it fills.
/// Once cut, a chunk of 16 items with no distance at or below the k-th best so far is rejected
/// by one vectorised test, and the lanes that pass are compared by key.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    buf: Vec<i64>,
    /// The k-th best key so far (`i64::MAX` until the first cut): only smaller keys enter.
    bound: i64,
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            buf: vec![],
            bound: i64::MAX,
        }
    }

    /// The buffer's size: the `k` kept and as many candidates again (32 at least) before a cut.
    fn cap(&self) -> usize {
        self.k + (self.k / 2).max(32)
    }

    /// Offers the items `first..first + row.len()` at distances `row`, leaving out `skip`.
    pub fn push(&mut self, row: &[f32], first: usize, skip: Option<usize>) {
        #[cfg(target_arch = "x86_64")]
        if crate::kernel::avx512() {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { self.push_avx512(row, first, skip) };
        }
        self.push_in(row, first, skip)
    }

    /// [`TopK::push_in`] compiled for AVX-512, where its chunk test takes one compare.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn push_avx512(&mut self, row: &[f32], first: usize, skip: Option<usize>) {
        self.push_in(row, first, skip)
    }

    #[inline(always)]
    fn push_in(&mut self, row: &[f32], first: usize, skip: Option<usize>) {
        if self.k == 0 {
            return;
        }
        let chunks = row.chunks_exact(16);
        let tail = chunks.remainder();
        for (c, chunk) in chunks.enumerate() {
            let bound = (self.bound >> 32) as i32;
            // Lane i set: item i may enter.
            let lanes = chunk
                .iter()
                .enumerate()
                .fold(0u32, |m, (i, &d)| m | (u32::from(ordered(d) <= bound) << i));
            self.push_lanes(chunk, first + c * 16, skip, lanes);
        }
        self.push_lanes(tail, first + row.len() - tail.len(), skip, (1u32 << tail.len()) - 1);
    }

    /// Pushes the items of `chunk` (the first is item `start`) whose lanes are set in `lanes`
    /// and whose keys are below the bound; cuts when the buffer fills.
    #[inline(always)]
    fn push_lanes(&mut self, chunk: &[f32], start: usize, skip: Option<usize>, mut lanes: u32) {
        while lanes != 0 {
            let i = lanes.trailing_zeros() as usize;
            lanes &= lanes - 1;
            let key = key64(chunk[i], (start + i) as u32);
            if key < self.bound && Some(start + i) != skip {
                self.buf.push(key);
                if self.buf.len() >= self.cap() {
                    self.cut();
                }
            }
        }
    }

    /// Keeps the `k` smallest keys (in any order); the largest kept becomes the bound.
    fn cut(&mut self) {
        let k = self.k;
        self.buf.select_nth_unstable(k - 1);
        self.buf.truncate(k);
        self.bound = self.buf[k - 1];
    }

    /// The `k` nearest (fewer if fewer were offered), nearest first.
    pub fn finish(mut self) -> Vec<(f32, u32)> {
        if self.buf.len() > self.k {
            self.cut();
        }
        self.buf.sort_unstable();
        self.buf.iter().map(|&key| (distance_of(key), key as u32)).collect()
    }
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
                    let mut top = TopK::new(k);
                    top.push_in(&row, 0, skip);
                    assert_eq!(bits(&top.finish()), bits(&all));
                    // Given in blocks, last block first.
                    let mut top = TopK::new(k);
                    let cut = n / 3;
                    top.push(&row[cut..], cut, skip);
                    top.push(&row[..cut], 0, skip);
                    assert_eq!(bits(&top.finish()), bits(&all));
                }
            }
        }
    }
}
