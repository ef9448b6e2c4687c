//! Host kernels of 2-D max pooling (NCHW, f32): the forward pass keeps, per output, the offset
//! of its maximum inside the input plane, and the backward pass adds each output gradient onto
//! that pixel.
//!
//! Why our own: burn 0.22's Flex pooling took 75 ms for the forward and backward pass of C2F2's
//! first pooling layer at batch 256 (`examples/op_profile`); this forward takes 3–8 ms of wall
//! time with the 2×2 rows vectorised and `rdml::tune_allocator` on (`examples/pool_kernel`).

use rayon::prelude::*;

/// Window, stride and leading padding `[height, width]`, input and output sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolGeometry {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub input: [usize; 2],
    pub output: [usize; 2],
}

impl PoolGeometry {
    /// PyTorch's output size (floor mode, no dilation); `None` when the window does not fit or
    /// the padding exceeds half the window (PyTorch's rule, so that no window is all padding).
    pub fn new(kernel: [usize; 2], stride: [usize; 2], pad: [usize; 2], input: [usize; 2]) -> Option<Self> {
        let mut output = [0; 2];
        for a in 0..2 {
            let padded = input[a] + 2 * pad[a];
            if stride[a] == 0 || kernel[a] == 0 || padded < kernel[a] || 2 * pad[a] > kernel[a] {
                return None;
            }
            output[a] = (padded - kernel[a]) / stride[a] + 1;
        }
        Some(Self {
            kernel,
            stride,
            pad,
            input,
            output,
        })
    }
}

/// Max over each window, per plane; returns the outputs and the in-plane offset of each
/// window's first maximum (NaN wins, as in PyTorch).
pub fn forward(x: &[f32], g: &PoolGeometry) -> (Vec<f32>, Vec<u32>) {
    let (hw_in, hw_out) = (g.input[0] * g.input[1], g.output[0] * g.output[1]);
    let planes = x.len() / hw_in.max(1);
    let mut y = super::shared::zeroed::<f32>(planes * hw_out);
    let mut idx = super::shared::zeroed::<u32>(planes * hw_out);
    y.par_chunks_mut(hw_out)
        .zip(idx.par_chunks_mut(hw_out))
        .zip(x.par_chunks(hw_in))
        .for_each(|((yp, ip), xp)| plane_forward(xp, g, yp, ip));
    (y, idx)
}

fn plane_forward(x: &[f32], g: &PoolGeometry, y: &mut [f32], idx: &mut [u32]) {
    let [h, w] = g.input;
    let [ho, wo] = g.output;
    if g.kernel == [2, 2] && g.stride == [2, 2] && g.pad == [0, 0] {
        #[cfg(target_arch = "x86_64")]
        if super::shared::avx512() {
            for oh in 0..ho {
                let (r0, r1) = (&x[2 * oh * w..][..2 * wo], &x[(2 * oh + 1) * w..][..2 * wo]);
                let (yr, ir) = (&mut y[oh * wo..][..wo], &mut idx[oh * wo..][..wo]);
                // SAFETY: AVX-512F is present; the slices have the lengths the kernel reads.
                unsafe { rows_2x2(r0, r1, w as u32, (2 * oh * w) as u32, yr, ir) };
            }
            return;
        }
        // C2F2's pooling: two rows at a time, no bounds checks.
        for oh in 0..ho {
            let (r0, r1) = (&x[2 * oh * w..][..w], &x[(2 * oh + 1) * w..][..w]);
            for ow in 0..wo {
                let c = 2 * ow;
                let cands = [(r0[c], c), (r0[c + 1], c + 1), (r1[c], w + c), (r1[c + 1], w + c + 1)];
                let mut best = cands[0];
                for &cand in &cands[1..] {
                    if cand.0 > best.0 || (cand.0.is_nan() && !best.0.is_nan()) {
                        best = cand;
                    }
                }
                y[oh * wo + ow] = best.0;
                idx[oh * wo + ow] = (2 * oh * w + best.1) as u32;
            }
        }
        return;
    }
    for oh in 0..ho {
        for ow in 0..wo {
            let (mut best, mut at) = (f32::NEG_INFINITY, None);
            for i in 0..g.kernel[0] {
                let ih = (oh * g.stride[0] + i) as isize - g.pad[0] as isize;
                if ih < 0 || ih as usize >= h {
                    continue;
                }
                for j in 0..g.kernel[1] {
                    let iw = (ow * g.stride[1] + j) as isize - g.pad[1] as isize;
                    if iw < 0 || iw as usize >= w {
                        continue;
                    }
                    let o = ih as usize * w + iw as usize;
                    let v = x[o];
                    if at.is_none() || v > best || (v.is_nan() && !best.is_nan()) {
                        (best, at) = (v, Some(o));
                    }
                }
            }
            // `new` guarantees every window overlaps the image, so `at` is set.
            let o = at.unwrap_or(0);
            y[oh * wo + ow] = best;
            idx[oh * wo + ow] = o as u32;
        }
    }
}

/// One output row of a 2×2/2 pooling, 16 windows per step: the windows' four pixels are
/// deinterleaved into four vectors and the first maximum (NaN winning) picked lane-wise.
/// `r0`, `r1` hold `2·wo` pixels of the two input rows, `top` is `r0`'s offset in its plane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_2x2(r0: &[f32], r1: &[f32], w: u32, top: u32, y: &mut [f32], idx: &mut [u32]) {
    use std::arch::x86_64::*;
    let wo = y.len();
    assert!(r0.len() >= 2 * wo && r1.len() >= 2 * wo && idx.len() >= wo);
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    let lane2 = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(2),
    );
    let mask = |n: usize| -> __mmask16 { if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as u16 } };
    for o0 in (0..wo).step_by(16) {
        let n = (wo - o0).min(16);
        let (m_lo, m_hi) = (mask(2 * n), mask((2 * n).saturating_sub(16)));
        // SAFETY: masked lanes are neither read nor written; the unmasked ones lie within
        // 2·wo pixels of r0/r1 and wo outputs of y/idx (asserted above).
        unsafe {
            let pair = |r: &[f32]| {
                let lo = _mm512_maskz_loadu_ps(m_lo, r.as_ptr().add(2 * o0));
                let hi = _mm512_maskz_loadu_ps(m_hi, r.as_ptr().add(2 * o0 + 16));
                (
                    _mm512_permutex2var_ps(lo, even, hi),
                    _mm512_permutex2var_ps(lo, odd, hi),
                )
            };
            let ((a, b), (c, d)) = (pair(r0), pair(r1));
            let (mut best, mut at) = (a, _mm512_setzero_si512());
            for (v, off) in [(b, 1), (c, w), (d, w + 1)] {
                let greater = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, best);
                let nan_over_number =
                    _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v) & !_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(best, best);
                let take = greater | nan_over_number;
                best = _mm512_mask_mov_ps(best, take, v);
                at = _mm512_mask_mov_epi32(at, take, _mm512_set1_epi32(off as i32));
            }
            let base = _mm512_add_epi32(_mm512_set1_epi32((top + 2 * o0 as u32) as i32), lane2);
            let m = mask(n);
            _mm512_mask_storeu_ps(y.as_mut_ptr().add(o0), m, best);
            _mm512_mask_storeu_epi32(idx.as_mut_ptr().add(o0).cast::<i32>(), m, _mm512_add_epi32(base, at));
        }
    }
}

/// Adds each output gradient onto the input pixel its forward maximum came from.
pub fn backward(grad: &[f32], idx: &[u32], g: &PoolGeometry) -> Vec<f32> {
    let (hw_in, hw_out) = (g.input[0] * g.input[1], g.output[0] * g.output[1]);
    let planes = grad.len() / hw_out.max(1);
    let mut dx = super::shared::zeroed::<f32>(planes * hw_in);
    dx.par_chunks_mut(hw_in)
        .zip(grad.par_chunks(hw_out).zip(idx.par_chunks(hw_out)))
        .for_each(|(dp, (gp, ip))| {
            for (gv, &i) in gp.iter().zip(ip) {
                dp[i as usize] += gv;
            }
        });
    dx
}
