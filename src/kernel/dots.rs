//! Dot products of every row of `a` with every row of `b` (`a·bᵀ`, both row-major `· × d`) on
//! AVX-512, each one fused multiply-add chain over the dimensions in order, from zero. So the
//! value of a pair does not depend on the shapes, on where the pair sits in them, nor on which of
//! the two is `a`: computed alone, in a block of others, or as `(b, a)`, it is the same number
//! (a BLAS splits and orders its sums by the shapes). `b` is packed in panels of [`NR`] rows,
//! k-major, once; `a` in panels of [`MR`] rows, a block at a time, broadcast.

/// Rows of `a` per register tile (broadcast).
const MR: usize = 8;
/// Rows of `b` per register tile (NV vectors of 16).
const NR: usize = 16 * NV;
const NV: usize = 3;
/// Dimensions per slab: a slab of a `b` panel is 512 KiB at most (L2).
const KC: usize = 2048;
/// Steps of k ahead that a tile asks for its `b` panel.
const PREFETCH: usize = 8;
/// Bytes of `a` per block (L2).
const MC_BYTES: usize = 384 << 10;

/// Whether [`dots`] runs here (it needs AVX-512F).
pub fn available() -> bool {
    super::avx512()
}

/// `out[i * ldo + j] = a_i · b_j` for every row `i` of `a` and `j` of `b` (`d` values each);
/// `out` holds at least `(rows(a) − 1) · ldo + rows(b)` values. Panics without AVX-512F
/// ([`available`]) or with shapes that do not fit.
pub fn dots(a: &[f32], b: &[f32], d: usize, out: &mut [f32], ldo: usize) {
    dots_packed(a, &Packed::new(b, d), out, ldo, Finish::Dots);
}

/// `b`'s rows packed for [`dots_packed`], which several calls (threads) may share.
pub struct Packed {
    panels: Vec<f32>,
    rows: usize,
    d: usize,
}

impl Packed {
    /// Panics when `b` is not rows of `d` values.
    pub fn new(b: &[f32], d: usize) -> Self {
        assert!(d > 0 && b.len().is_multiple_of(d), "rows of {d} values");
        let rows = b.len() / d;
        let mut panels = vec![0.0f32; rows.div_ceil(NR) * d * NR];
        for (p, dst) in panels.chunks_exact_mut(d * NR).enumerate() {
            pack_panel(b, d, p * NR, NR, dst);
        }
        Self { panels, rows, d }
    }
}

/// What [`dots_packed`] writes of each product.
#[derive(Debug, Clone, Copy)]
pub enum Finish<'a> {
    /// The dot product.
    Dots,
    /// The squared distance from the rows' squared norms ([`squared`]): those of `a`'s rows
    /// and of `b`'s.
    Squared { a: &'a [f32], b: &'a [f32] },
}

/// A squared distance from two squared norms and the dot product, as [`Finish::Squared`]
/// writes it: `‖a‖² + ‖b‖² − 2 a·b`, or 0 where that is not above 0.
#[inline(always)]
pub fn squared(na: f32, nb: f32, dot: f32) -> f32 {
    let v = na + nb - 2.0 * dot;
    if v > 0.0 { v } else { 0.0 }
}

/// [`dots`] with `b` packed, each product written as `finish` says.
pub fn dots_packed(a: &[f32], b: &Packed, out: &mut [f32], ldo: usize, finish: Finish) {
    assert!(available(), "dots needs AVX-512F");
    let d = b.d;
    assert!(a.len().is_multiple_of(d), "rows of {d} values");
    let (ra, rb) = (a.len() / d, b.rows);
    if ra == 0 || rb == 0 {
        return;
    }
    assert!(ldo >= rb && out.len() >= (ra - 1) * ldo + rb, "out too small");
    if let Finish::Squared { a: na, b: nb } = finish {
        assert!(na.len() == ra && nb.len() == rb, "a squared norm per row");
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F is there (asserted above); the shapes were checked.
    unsafe {
        dots_avx512(a, b, out, ldo, finish)
    }
}

/// Packs rows `j0..j0 + w` of `m` (fewer at the end: `out` keeps its zeros there), k-major,
/// into `out` (`d · w`).
fn pack_panel(m: &[f32], d: usize, j0: usize, w: usize, out: &mut [f32]) {
    let rows = w.min(m.len() / d - j0);
    if w == MR {
        // Few rows: read them side by side, write each k's values together.
        let src: Vec<&[f32]> = (0..rows).map(|l| &m[(j0 + l) * d..(j0 + l + 1) * d]).collect();
        for (k, dst) in out.chunks_exact_mut(w).enumerate() {
            for (v, row) in dst.iter_mut().zip(&src) {
                *v = row[k];
            }
        }
        return;
    }
    for lane in 0..rows {
        let row = &m[(j0 + lane) * d..(j0 + lane + 1) * d];
        for (dst, &v) in out.iter_mut().skip(lane).step_by(w).zip(row) {
            *dst = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn dots_avx512(a: &[f32], b: &Packed, out: &mut [f32], ldo: usize, finish: Finish) {
    let (d, rb, bp) = (b.d, b.rows, &b.panels);
    let ra = a.len() / d;
    // A block of `a` (packed in panels of MR rows) stays in L2 while every panel of `b` passes.
    let mc = (MC_BYTES / (4 * d)).max(1).next_multiple_of(MR);
    let mut ap = vec![0.0f32; mc * d];
    for i_block in (0..ra).step_by(mc) {
        let i_end = (i_block + mc).min(ra);
        for (p, dst) in ap
            .chunks_exact_mut(d * MR)
            .take((i_end - i_block).div_ceil(MR))
            .enumerate()
        {
            dst.fill(0.0);
            pack_panel(a, d, i_block + p * MR, MR, dst);
        }
        for k0 in (0..d).step_by(KC) {
            let kc = KC.min(d - k0);
            for (p, panel) in bp.chunks_exact(d * NR).enumerate() {
                let (j0, slab) = (p * NR, &panel[k0 * NR..(k0 + kc) * NR]);
                let cols = NR.min(rb - j0);
                for (q, apanel) in ap.chunks_exact(d * MR).take((i_end - i_block).div_ceil(MR)).enumerate() {
                    let i0 = i_block + q * MR;
                    let rows = MR.min(ra - i0);
                    // The squared norms of the tile's rows and columns, on its last slab.
                    let norms = match finish {
                        Finish::Squared { a: na, b: nb } if k0 + kc == d => Some((&na[i0..], &nb[j0..])),
                        _ => None,
                    };
                    // SAFETY: the slabs hold kc × MR and kc × NR values; the tile written is
                    // rows × cols at (i0, j0), inside `out` by the caller's check.
                    unsafe {
                        tile(
                            &apanel[k0 * MR..(k0 + kc) * MR],
                            slab,
                            (kc, k0 == 0),
                            &mut out[i0 * ldo + j0..],
                            ldo,
                            (rows, cols),
                            norms,
                        )
                    };
                }
            }
        }
    }
}

/// One `MR × NR` tile of which `rows × cols` are real: `c = (first ? 0 : c) + Σ_k a_k ⊗ b_k`
/// over the slab, one FMA per product in k order (`ap`, `bp`: the slab's panels, k-major).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile(
    ap: &[f32],
    bp: &[f32],
    (kc, first): (usize, bool),
    c: &mut [f32],
    ldc: usize,
    (rows, cols): (usize, usize),
    norms: Option<(&[f32], &[f32])>,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    // Lanes of the last vectors that exist in a partial tile; vectors past `cols` are not
    // touched at all (nor their addresses formed).
    let mask = |v: usize| -> __mmask16 {
        let n = cols.saturating_sub(16 * v).min(16);
        ((1u32 << n) - 1) as __mmask16
    };
    let live = cols.div_ceil(16).min(NV);
    if !first {
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            for (v, x) in acc.iter_mut().enumerate().take(live) {
                // SAFETY: row r < rows and the masked lanes < cols lie inside `c`; v < live keeps
                // the vector's first lane inside the row.
                *x = unsafe { _mm512_maskz_loadu_ps(mask(v), c.as_ptr().add(r * ldc + 16 * v)) };
            }
        }
    }
    let (a, b) = (ap.as_ptr(), bp.as_ptr());
    for k in 0..kc {
        // SAFETY: k < kc: b + k·NR + NR and a + k·MR + MR stay inside the slabs.
        unsafe {
            // The panel comes from L2: ask for it a few steps ahead (past its end, harmlessly:
            // a prefetch does not fault, and the address is only formed, wrapping).
            for v in 0..NV {
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((k + PREFETCH) * NR + 16 * v).cast());
            }
            let bv: [__m512; NV] = std::array::from_fn(|v| _mm512_loadu_ps(b.add(k * NR + 16 * v)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(k * MR + r));
                for (x, &bv) in acc.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, bv, *x);
                }
            }
        }
    }
    if let Some((na, nb)) = norms {
        // ‖a‖² + ‖b‖² − 2 a·b, or 0 where not above 0 ([`squared`]).
        let (two, zero) = (_mm512_set1_ps(2.0), _mm512_setzero_ps());
        // SAFETY: `nb` has the tile's cols values (masked lanes only are read, v < live).
        let nbv: [__m512; NV] = std::array::from_fn(|v| {
            if v < live {
                unsafe { _mm512_maskz_loadu_ps(mask(v), nb.as_ptr().add(16 * v)) }
            } else {
                zero
            }
        });
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            let nav = _mm512_set1_ps(na[r]);
            for (x, &nbv) in acc.iter_mut().zip(&nbv) {
                let v = _mm512_sub_ps(_mm512_add_ps(nav, nbv), _mm512_mul_ps(two, *x));
                *x = _mm512_max_ps(v, zero);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate().take(rows) {
        for (v, &x) in acc.iter().enumerate().take(live) {
            // SAFETY: as for the loads.
            unsafe { _mm512_mask_storeu_ps(c.as_mut_ptr().add(r * ldc + 16 * v), mask(v), x) };
        }
    }
}

/// `a · b` as [`dots`] computes it: one fused chain over `k` from zero.
pub fn dot_chain(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0f32, |acc, (&x, &y)| x.mul_add(y, acc))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The squared distances are the products' own, finished by `squared`.
    #[test]
    fn squared_distances_finish_the_products() {
        if !available() {
            return;
        }
        let (ra, rb, d) = (9, 70, 130);
        let a: Vec<f32> = (0..ra * d).map(|i| ((i * 37) % 11) as f32 / 11.0).collect();
        let mut b: Vec<f32> = (0..rb * d).map(|i| ((i * 53) % 13) as f32 / 13.0).collect();
        // Row 5 of b is row 2 of a: a distance of (about) 0.
        b[5 * d..6 * d].copy_from_slice(&a[2 * d..3 * d]);
        let norm = |r: &[f32]| r.iter().map(|v| v * v).sum::<f32>();
        let na: Vec<f32> = a.chunks(d).map(norm).collect();
        let nb: Vec<f32> = b.chunks(d).map(norm).collect();
        let mut out = vec![0.0; ra * rb];
        dots_packed(
            &a,
            &Packed::new(&b, d),
            &mut out,
            rb,
            Finish::Squared { a: &na, b: &nb },
        );
        for i in 0..ra {
            for j in 0..rb {
                let want = squared(na[i], nb[j], dot_chain(&a[i * d..][..d], &b[j * d..][..d]));
                assert_eq!(out[i * rb + j].to_bits(), want.to_bits(), "({i}, {j})");
            }
        }
        assert!(out[2 * rb + 5] < 1e-4);
    }

    /// Every product equals its fused chain computed alone, bit for bit, for shapes with
    /// partial tiles and several slabs and column blocks; (b, a) gives the transpose.
    #[test]
    fn each_product_is_its_own_chain_whatever_the_shapes() {
        if !available() {
            return;
        }
        let mut x = 3u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for (ra, rb, d) in [
            (1, 1, 1),
            (7, 70, 3),
            (13, 1100, 300),
            (6, 64, 128),
            (40, 129, 257),
            (5, 70, 4100),
        ] {
            let a: Vec<f32> = (0..ra * d).map(|_| next()).collect();
            let b: Vec<f32> = (0..rb * d).map(|_| next()).collect();
            let ldo = rb + 3;
            let mut out = vec![f32::NAN; ra * ldo];
            dots(&a, &b, d, &mut out, ldo);
            let mut back = vec![0.0; rb * ra];
            dots(&b, &a, d, &mut back, ra);
            for i in 0..ra {
                for j in 0..rb {
                    let want = dot_chain(&a[i * d..][..d], &b[j * d..][..d]);
                    assert_eq!(
                        out[i * ldo + j].to_bits(),
                        want.to_bits(),
                        "({i}, {j}) of {ra}×{rb}×{d}"
                    );
                    assert_eq!(back[j * ra + i].to_bits(), want.to_bits());
                }
                // The padding between rows is left alone.
                assert!(out[i * ldo + rb..(i + 1) * ldo].iter().all(|v| v.is_nan()));
            }
        }
    }
}
