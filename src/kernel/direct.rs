//! Stride-1 convolution as direct AVX-512 kernels: implicit GEMMs that read the zero-padded
//! image where the im2col path reads a copied matrix, for the forward pass and both gradients.
//!
//! Why: the gemm crate runs C2F2's convolution shapes at 50–60 GFLOP/s per core here, under half
//! of this machine's AVX-512 rate, and the im2col copy is 25× the image. Each tile below keeps
//! `16·CV × NR` sums in registers over the whole reduction: per reduction step CV weight loads
//! and NR broadcasts feed CV·NR fused multiply-adds.
//!
//! - forward: `y[co][oh][ow] = Σ_{ci,i,j} w[co][ci][i][j]·x̃[ci][oh+i][ow+j]` (x̃ padded);
//! - input gradient: the same kernel on ∂y, with the filter flipped in both axes, its channel
//!   axes swapped and padding `k − 1 − p`;
//! - weight gradient: `∂w[co][ci][i][j] = Σ_b Σ_{oh,ow} ∂y[co][oh][ow]·x̃[ci][oh+i][ow+j]`.

use rayon::prelude::*;

/// One stride-1, dilation-1 convolution: channels, kernel, leading padding, input and output
/// sizes (`[height, width]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: [usize; 2],
    pub pad: [usize; 2],
    pub input: [usize; 2],
    pub output: [usize; 2],
}

impl Shape {
    fn k(&self) -> usize {
        self.c_in * self.kernel[0] * self.kernel[1]
    }

    /// Padded input: every row and column a tile reads, `output + kernel − 1`.
    fn padded(&self) -> [usize; 2] {
        [self.output[0] + self.kernel[0] - 1, self.output[1] + self.kernel[1] - 1]
    }

    /// The shape whose forward pass is this one's input gradient.
    fn transposed(&self) -> Self {
        Self {
            c_in: self.c_out,
            c_out: self.c_in,
            kernel: self.kernel,
            pad: [self.kernel[0] - 1 - self.pad[0], self.kernel[1] - 1 - self.pad[1]],
            input: self.output,
            output: self.input,
        }
    }
}

/// The forward kernel vectorises over output channels: whole 16-lane groups only.
/// Short reductions (C2F2's first layer: 25 terms) stay on the im2col path, measured faster.
pub fn forward_applies(s: &Shape) -> bool {
    super::shared::avx512() && s.c_out.is_multiple_of(16) && s.kernel.iter().all(|&k| k > 0) && s.k() >= 64
}

/// The input gradient runs the forward kernel on the transposed shape (padding `k − 1 − p`).
pub fn input_grad_applies(s: &Shape) -> bool {
    s.pad[0] < s.kernel[0] && s.pad[1] < s.kernel[1] && forward_applies(s) && forward_applies(&s.transposed())
}

/// Kernel widths with a weight-gradient tile (the tile's register count grows with it).
pub fn weight_grad_applies(s: &Shape) -> bool {
    forward_applies(s) && matches!(s.kernel[1], 3 | 5 | 7)
}

/// Copies image `x [c][h][w]` into the interior of `xp [c][hp][wp]`, whose border stays zero.
fn pad_into(x: &[f32], s: &Shape, xp: &mut [f32]) {
    let ([h, w], [hp, wp], [pt, pl]) = (s.input, s.padded(), s.pad);
    for (src, dst) in x.chunks(h * w).zip(xp.chunks_mut(hp * wp)) {
        for r in 0..h {
            let pr = r + pt;
            if pr < hp {
                let n = w.min(wp.saturating_sub(pl));
                dst[pr * wp + pl..][..n].copy_from_slice(&src[r * w..][..n]);
            }
        }
    }
}

/// Forward pass, `x [batch, c_in, h, w]`, `weight [c_out, c_in, kh, kw]` → `[batch, c_out, ho, wo]`.
pub fn forward(x: &[f32], batch: usize, weight: &[f32], bias: Option<&[f32]>, s: &Shape) -> Vec<f32> {
    let k = s.k();
    // packed[t][co] = weight[co][t]: one reduction step's weights are adjacent.
    let mut packed = vec![0.0f32; k * s.c_out];
    for (co, row) in weight.chunks(k).enumerate() {
        for (t, &v) in row.iter().enumerate() {
            packed[t * s.c_out + co] = v;
        }
    }
    run(x, batch, &packed, bias, s)
}

/// Input gradient, `grad [batch, c_out, ho, wo]` → `[batch, c_in, h, w]`.
pub fn input_grad(grad: &[f32], batch: usize, weight: &[f32], s: &Shape) -> Vec<f32> {
    let t = s.transposed();
    let [kh, kw] = s.kernel;
    let mut packed = vec![0.0f32; t.k() * t.c_out];
    for co in 0..s.c_out {
        for ci in 0..s.c_in {
            for i in 0..kh {
                for j in 0..kw {
                    let flipped = ((co * kh + (kh - 1 - i)) * kw + (kw - 1 - j)) * s.c_in + ci;
                    packed[flipped] = weight[((co * s.c_in + ci) * kh + i) * kw + j];
                }
            }
        }
    }
    run(grad, batch, &packed, None, &t)
}

fn run(x: &[f32], batch: usize, packed: &[f32], bias: Option<&[f32]>, s: &Shape) -> Vec<f32> {
    let ([h, w], [ho, wo], [hp, wp]) = (s.input, s.output, s.padded());
    let (x_len, n_out) = (s.c_in * h * w, ho * wo);
    let mut y = super::shared::zeroed::<f32>(batch * s.c_out * n_out);
    y.par_chunks_mut(s.c_out * n_out)
        .zip(x.par_chunks(x_len))
        .for_each_init(
            || (vec![0.0f32; s.c_in * hp * wp], vec![0.0f32; n_out * s.c_out]),
            |(xp, t), (yb, xb)| {
                pad_into(xb, s, xp);
                tiles(xp, packed, s, t);
                // t is [pixel][co]; the tensor is [co][pixel].
                for (co, plane) in yb.chunks_mut(n_out).enumerate() {
                    let b = bias.map_or(0.0, |b| b[co]);
                    for (p, v) in plane.iter_mut().enumerate() {
                        *v = t[p * s.c_out + co] + b;
                    }
                }
            },
        );
    y
}

/// Widest channel group per tile (in 16-lane vectors) and pixels per tile: ≤ 28 accumulators.
fn tiles(xp: &[f32], packed: &[f32], s: &Shape, t: &mut [f32]) {
    assert!(forward_applies(s));
    assert!(xp.len() >= s.c_in * s.padded()[0] * s.padded()[1]);
    assert!(packed.len() >= s.k() * s.c_out && t.len() >= s.output[0] * s.output[1] * s.c_out);
    // SAFETY: AVX-512F is present (`forward_applies`) and the asserts bound every access.
    unsafe {
        match s.c_out {
            c if c.is_multiple_of(64) => tiles_for::<4, 7>(xp, packed, s, t),
            c if c.is_multiple_of(32) => tiles_for::<2, 14>(xp, packed, s, t),
            _ => tiles_for::<1, 14>(xp, packed, s, t),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tiles_for<const CV: usize, const NR: usize>(_: &[f32], _: &[f32], _: &Shape, _: &mut [f32]) {
    unreachable!("forward_applies is false off x86-64")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tiles_for<const CV: usize, const NR: usize>(xp: &[f32], packed: &[f32], s: &Shape, t: &mut [f32]) {
    let ([ho, wo], [hp, wp], [kh, kw]) = (s.output, s.padded(), s.kernel);
    // Input channels per pass over the tiles: their weights (≤ 24 KiB) stay in L1 for all tiles.
    let block = (24 * 1024 / (kh * kw * CV * 64)).clamp(1, s.c_in);
    for cb in (0..s.c_out).step_by(16 * CV) {
        for c0 in (0..s.c_in).step_by(block) {
            let channels = block.min(s.c_in - c0);
            for oh in 0..ho {
                let mut ow = 0;
                while ow < wo {
                    // SAFETY: tile (oh, ow) reads rows oh..oh+kh and columns ow..ow+NR+kw−1 of
                    // planes c0..c0+channels, their packed weights, and NR pixels × 16·CV
                    // channels of t; the caller checked the buffer sizes.
                    unsafe {
                        let x = xp.as_ptr().add(c0 * hp * wp + oh * wp + ow);
                        let w = packed.as_ptr().add(c0 * kh * kw * s.c_out + cb);
                        let out = t.as_mut_ptr().add((oh * wo + ow) * s.c_out + cb);
                        let run = Run {
                            row: wp,
                            plane: hp * wp,
                            channels,
                            first: c0 == 0,
                        };
                        if ow + NR <= wo {
                            tile::<CV, NR>(x, &run, s, w, out);
                            ow += NR;
                        } else {
                            tile::<CV, 1>(x, &run, s, w, out);
                            ow += 1;
                        }
                    }
                }
            }
        }
    }
}

/// One tile's pass: padded row and plane strides, input channels, and whether it starts the
/// sums (else it adds to what `out` holds).
#[cfg(target_arch = "x86_64")]
struct Run {
    row: usize,
    plane: usize,
    channels: usize,
    first: bool,
}

/// `out[p][v·16..] (+)= Σ_{ci,i,j} packed[(ci,i,j)][v·16..]·x[ci][i][j + p]` for `p < NR`, `v < CV`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // a register tile indexed [vector][pixel] both ways
unsafe fn tile<const CV: usize, const NR: usize>(x: *const f32, r: &Run, s: &Shape, w: *const f32, out: *mut f32) {
    use std::arch::x86_64::*;
    let [kh, kw] = s.kernel;
    let mut acc = [[_mm512_setzero_ps(); NR]; CV];
    if !r.first {
        for p in 0..NR {
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: pixel p of the tile, channels v·16.. of the group (see tiles_for).
                a[p] = unsafe { _mm512_loadu_ps(out.add(p * s.c_out + 16 * v)) };
            }
        }
    }
    let mut wk = w;
    for ci in 0..r.channels {
        for i in 0..kh {
            // SAFETY: within the padded plane and the packed weights (see tiles_for).
            unsafe {
                let xr = x.add(ci * r.plane + i * r.row);
                for j in 0..kw {
                    let mut wv = [_mm512_setzero_ps(); CV];
                    for (v, wv) in wv.iter_mut().enumerate() {
                        *wv = _mm512_loadu_ps(wk.add(16 * v));
                    }
                    for p in 0..NR {
                        let b = _mm512_set1_ps(*xr.add(j + p));
                        for v in 0..CV {
                            acc[v][p] = _mm512_fmadd_ps(wv[v], b, acc[v][p]);
                        }
                    }
                    wk = wk.add(s.c_out);
                }
            }
        }
    }
    for p in 0..NR {
        for (v, a) in acc.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(out.add(p * s.c_out + 16 * v), a[p]) };
        }
    }
}

/// Weight gradient `[c_out, c_in, kh, kw]`, summed over the batch (one accumulator per thread).
pub fn weight_grad(x: &[f32], batch: usize, grad: &[f32], s: &Shape) -> Vec<f32> {
    assert!(weight_grad_applies(s));
    let ([h, w], [ho, wo], [hp, wp]) = (s.input, s.output, s.padded());
    let (x_len, n_out, k) = (s.c_in * h * w, ho * wo, s.k());
    // acc[t][co], t = (ci, i, j): one tile's sums are adjacent.
    let acc = super::shared::sum_per_thread(
        (x, x_len),
        (grad, s.c_out * n_out),
        batch,
        k * s.c_out,
        |xs, gs, acc| {
            let (mut xp, mut dy) = (vec![0.0f32; s.c_in * hp * wp], vec![0.0f32; n_out * s.c_out]);
            for (xb, gb) in xs.chunks(x_len).zip(gs.chunks(s.c_out * n_out)) {
                pad_into(xb, s, &mut xp);
                for (co, plane) in gb.chunks(n_out).enumerate() {
                    for (p, &v) in plane.iter().enumerate() {
                        dy[p * s.c_out + co] = v;
                    }
                }
                weight_tiles(&xp, &dy, s, acc);
            }
        },
    );
    let mut out = vec![0.0f32; s.c_out * k];
    for (t, row) in acc.chunks(s.c_out).enumerate() {
        for (co, &v) in row.iter().enumerate() {
            out[co * k + t] = v;
        }
    }
    out
}

fn weight_tiles(xp: &[f32], dy: &[f32], s: &Shape, acc: &mut [f32]) {
    let [hp, wp] = s.padded();
    assert!(xp.len() >= s.c_in * hp * wp && dy.len() >= s.output[0] * s.output[1] * s.c_out);
    assert!(acc.len() >= s.k() * s.c_out);
    // SAFETY: AVX-512F is present (`weight_grad_applies`) and the asserts bound every access.
    unsafe {
        let cv = [4, 2, 1].into_iter().find(|cv| s.c_out.is_multiple_of(16 * cv));
        match (cv, s.kernel[1]) {
            (Some(4), 3) => weight_tiles_for::<4, 3>(xp, dy, s, acc),
            (Some(4), 5) => weight_tiles_for::<4, 5>(xp, dy, s, acc),
            (Some(4), _) => weight_tiles_for::<4, 7>(xp, dy, s, acc),
            (Some(2), 3) => weight_tiles_for::<2, 3>(xp, dy, s, acc),
            (Some(2), 5) => weight_tiles_for::<2, 5>(xp, dy, s, acc),
            (Some(2), _) => weight_tiles_for::<2, 7>(xp, dy, s, acc),
            (_, 3) => weight_tiles_for::<1, 3>(xp, dy, s, acc),
            (_, 5) => weight_tiles_for::<1, 5>(xp, dy, s, acc),
            (_, _) => weight_tiles_for::<1, 7>(xp, dy, s, acc),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn weight_tiles_for<const CV: usize, const KW: usize>(_: &[f32], _: &[f32], _: &Shape, _: &mut [f32]) {
    unreachable!("weight_grad_applies is false off x86-64")
}

/// For each (channel group, ci, i): `acc[(ci,i,j)][co] += Σ_{oh,ow} dy[oh,ow][co]·x̃[ci][oh+i][ow+j]`,
/// a few output rows at a time so that their ∂y (≤ 16 KiB) stays in L1 across all (ci, i).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // a register tile indexed [vector][column] both ways
unsafe fn weight_tiles_for<const CV: usize, const KW: usize>(xp: &[f32], dy: &[f32], s: &Shape, acc: &mut [f32]) {
    use std::arch::x86_64::*;
    let ([ho, wo], [hp, wp], kh) = (s.output, s.padded(), s.kernel[0]);
    debug_assert_eq!(s.kernel[1], KW);
    let rows = (16 * 1024 / (wo * s.c_out * 4)).clamp(1, ho);
    for r0 in (0..ho).step_by(rows) {
        let r1 = (r0 + rows).min(ho);
        for cb in (0..s.c_out).step_by(16 * CV) {
            for ci in 0..s.c_in {
                for i in 0..kh {
                    // SAFETY: rows oh+i < hp and columns ow+j < wp of plane ci; pixel rows of
                    // dy; rows (ci,i,0..KW) of acc — all inside the buffers checked by the caller.
                    unsafe {
                        let a_ptr = acc.as_mut_ptr().add(((ci * kh + i) * KW) * s.c_out + cb);
                        let mut a = [[_mm512_setzero_ps(); KW]; CV];
                        for j in 0..KW {
                            for (v, a) in a.iter_mut().enumerate() {
                                a[j] = _mm512_loadu_ps(a_ptr.add(j * s.c_out + 16 * v));
                            }
                        }
                        for oh in r0..r1 {
                            let xr = xp.as_ptr().add(ci * hp * wp + (oh + i) * wp);
                            let dr = dy.as_ptr().add(oh * wo * s.c_out + cb);
                            for ow in 0..wo {
                                let mut d = [_mm512_setzero_ps(); CV];
                                for (v, d) in d.iter_mut().enumerate() {
                                    *d = _mm512_loadu_ps(dr.add(ow * s.c_out + 16 * v));
                                }
                                for j in 0..KW {
                                    let b = _mm512_set1_ps(*xr.add(ow + j));
                                    for v in 0..CV {
                                        a[v][j] = _mm512_fmadd_ps(d[v], b, a[v][j]);
                                    }
                                }
                            }
                        }
                        for j in 0..KW {
                            for (v, a) in a.iter().enumerate() {
                                _mm512_storeu_ps(a_ptr.add(j * s.c_out + 16 * v), a[j]);
                            }
                        }
                    }
                }
            }
        }
    }
}
