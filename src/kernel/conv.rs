//! Host kernels of a 2-D convolution (NCHW, f32, groups = 1) as im2col + one GEMM per image, for
//! the forward pass and both gradients.
//!
//! Why our own: burn 0.22's Flex backend computes the weight gradient as a convolution whose
//! kernel is the whole output map (batch and channels swapped) and the input gradient as a
//! transposed convolution. Written as the textbook GEMMs, every pass runs at the forward's GEMM
//! rate: `y_b = W·col(x_b)`, `∂x_b = col⁻¹(Wᵀ·∂y_b)`, `∂W = Σ_b ∂y_b·col(x_b)ᵀ` (C2F2's conv2 at
//! batch 256, forward and both gradients: 190 ms against burn's 260; conv1 forward and weight
//! gradient: 36 against 136; `examples/op_profile`).
//! Images are split over rayon's threads; each GEMM runs single-threaded inside. Stride-1
//! convolutions with whole 16-channel groups take the faster direct kernels of `direct.rs`.

use rayon::prelude::*;

/// Spatial geometry of one convolution: stride, leading (top, left) padding, dilation, kernel
/// size and input/output sizes, all `[height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub dilation: [usize; 2],
    pub kernel: [usize; 2],
    pub input: [usize; 2],
    pub output: [usize; 2],
}

impl Geometry {
    /// Output size for padding `(begin, end)` per axis, as PyTorch's formula; `None` when the
    /// dilated kernel does not fit.
    pub fn new(
        stride: [usize; 2],
        padding: [(usize, usize); 2],
        dilation: [usize; 2],
        kernel: [usize; 2],
        input: [usize; 2],
    ) -> Option<Self> {
        let mut output = [0; 2];
        for a in 0..2 {
            let span = dilation[a] * (kernel[a].checked_sub(1)?) + 1;
            let padded = input[a] + padding[a].0 + padding[a].1;
            if stride[a] == 0 || padded < span {
                return None;
            }
            output[a] = (padded - span) / stride[a] + 1;
        }
        Some(Self {
            stride,
            pad: [padding[0].0, padding[1].0],
            dilation,
            kernel,
            input,
            output,
        })
    }

    fn spatial_out(&self) -> usize {
        self.output[0] * self.output[1]
    }

    fn spatial_in(&self) -> usize {
        self.input[0] * self.input[1]
    }

    /// The direct kernels' view of a stride-1, dilation-1 convolution that is not pointwise.
    pub fn direct(&self, c_in: usize, c_out: usize) -> Option<super::direct::Shape> {
        let plain = self.stride == [1, 1] && self.dilation == [1, 1] && !self.is_pointwise();
        plain.then_some(super::direct::Shape {
            c_in,
            c_out,
            kernel: self.kernel,
            pad: self.pad,
            input: self.input,
            output: self.output,
        })
    }

    /// A 1×1 kernel at stride 1 without padding: the image itself is its im2col matrix.
    fn is_pointwise(&self) -> bool {
        self.kernel == [1, 1] && self.stride == [1, 1] && self.pad == [0, 0]
    }

    /// For kernel column `j`: the range of output columns whose input column lies inside the
    /// image, and the input column of output column 0 (`ow·stride + off`).
    fn valid_cols(&self, j: usize) -> (usize, usize, isize) {
        let (s, w, wo) = (self.stride[1] as isize, self.input[1] as isize, self.output[1]);
        let off = (j * self.dilation[1]) as isize - self.pad[1] as isize;
        let lo = if off >= 0 { 0 } else { (-off + s - 1) / s } as usize;
        let hi = if w - off <= 0 { 0 } else { (w - off + s - 1) / s } as usize;
        let lo = lo.min(wo);
        (lo, hi.clamp(lo, wo), off)
    }

    /// Input row of output row `oh` under kernel row `i`, if inside the image.
    fn input_row(&self, oh: usize, i: usize) -> Option<usize> {
        let ih = (oh * self.stride[0] + i * self.dilation[0]) as isize - self.pad[0] as isize;
        (ih >= 0 && (ih as usize) < self.input[0]).then_some(ih as usize)
    }
}

/// `col[(c·kh + i)·kw + j][oh·wo + ow] = x[c][oh·s + i·d − p][ow·s + j·d − p]` (0 outside).
fn im2col(x: &[f32], channels: usize, g: &Geometry, col: &mut [f32]) {
    let (n_out, wo, w) = (g.spatial_out(), g.output[1], g.input[1]);
    let [kh, kw] = g.kernel;
    for c in 0..channels {
        let plane = &x[c * g.spatial_in()..][..g.spatial_in()];
        for i in 0..kh {
            for j in 0..kw {
                let row = &mut col[((c * kh + i) * kw + j) * n_out..][..n_out];
                let (lo, hi, off) = g.valid_cols(j);
                for oh in 0..g.output[0] {
                    let dst = &mut row[oh * wo..][..wo];
                    let Some(ih) = g.input_row(oh, i) else {
                        dst.fill(0.0);
                        continue;
                    };
                    let src = &plane[ih * w..][..w];
                    dst[..lo].fill(0.0);
                    dst[hi..].fill(0.0);
                    if g.stride[1] == 1 {
                        let start = (lo as isize + off) as usize;
                        dst[lo..hi].copy_from_slice(&src[start..start + (hi - lo)]);
                    } else {
                        for (ow, d) in dst.iter_mut().enumerate().take(hi).skip(lo) {
                            *d = src[(ow as isize * g.stride[1] as isize + off) as usize];
                        }
                    }
                }
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds every column entry back onto the pixel it was read from.
fn col2im(col: &[f32], channels: usize, g: &Geometry, x: &mut [f32]) {
    let (n_out, wo, w) = (g.spatial_out(), g.output[1], g.input[1]);
    let [kh, kw] = g.kernel;
    for c in 0..channels {
        let plane = &mut x[c * g.spatial_in()..][..g.spatial_in()];
        for i in 0..kh {
            for j in 0..kw {
                let row = &col[((c * kh + i) * kw + j) * n_out..][..n_out];
                let (lo, hi, off) = g.valid_cols(j);
                for oh in 0..g.output[0] {
                    let Some(ih) = g.input_row(oh, i) else {
                        continue;
                    };
                    let src = &row[oh * wo..][..wo];
                    let dst = &mut plane[ih * w..][..w];
                    for (ow, v) in src.iter().enumerate().take(hi).skip(lo) {
                        dst[(ow as isize * g.stride[1] as isize + off) as usize] += v;
                    }
                }
            }
        }
    }
}

/// `dst[m×n] (+)= lhs[m×k]·rhs[k×n]` with explicit (column, row) strides, single-threaded.
#[allow(clippy::too_many_arguments)]
fn gemm(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    accumulate: bool,
    lhs: &[f32],
    (lhs_cs, lhs_rs): (usize, usize),
    rhs: &[f32],
    (rhs_cs, rhs_rs): (usize, usize),
) {
    assert!(dst.len() >= m * n);
    assert!(m == 0 || k == 0 || lhs.len() > (m - 1) * lhs_rs + (k - 1) * lhs_cs);
    assert!(n == 0 || k == 0 || rhs.len() > (k - 1) * rhs_rs + (n - 1) * rhs_cs);
    // SAFETY: the asserts above keep every strided read inside `lhs`/`rhs` and every write
    // inside `dst`; the three slices cannot alias (one is borrowed mutably).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Forward: `x [n, c_in, h, w]`, `weight [c_out, c_in, kh, kw]` → `[n, c_out, ho, wo]`.
///
/// One GEMM per image: putting several images side by side in one wider GEMM was measured
/// slower here (its im2col matrix leaves the 2 MiB L2 cache).
pub fn forward(x: &[f32], batch: usize, weight: &[f32], c_out: usize, bias: Option<&[f32]>, g: &Geometry) -> Vec<f32> {
    let c_in = x.len() / (batch * g.spatial_in()).max(1);
    let (k, n_out, x_len) = dims(c_in, g);
    let mut y = super::shared::zeroed::<f32>(batch * c_out * n_out);
    y.par_chunks_mut(c_out * n_out).zip(x.par_chunks(x_len)).for_each_init(
        || vec![0.0f32; if g.is_pointwise() { 0 } else { k * n_out }],
        |col, (yb, xb)| {
            let rhs: &[f32] = if g.is_pointwise() {
                xb
            } else {
                im2col(xb, c_in, g, col);
                col
            };
            gemm((c_out, n_out, k), yb, false, weight, (1, k), rhs, (1, n_out));
            if let Some(bias) = bias {
                for (plane, b) in yb.chunks_mut(n_out).zip(bias) {
                    plane.iter_mut().for_each(|v| *v += b);
                }
            }
        },
    );
    y
}

/// `(c_in·kh·kw, ho·wo, c_in·h·w)`: GEMM depth, output map size, input image size.
fn dims(c_in: usize, g: &Geometry) -> (usize, usize, usize) {
    (c_in * g.kernel[0] * g.kernel[1], g.spatial_out(), c_in * g.spatial_in())
}

/// Gradient w.r.t. the input: `∂x_b = col⁻¹(Wᵀ·∂y_b)`.
pub fn input_grad(grad: &[f32], batch: usize, weight: &[f32], c_in: usize, c_out: usize, g: &Geometry) -> Vec<f32> {
    let (k, n_out, x_len) = dims(c_in, g);
    let mut dx = super::shared::zeroed::<f32>(batch * x_len);
    dx.par_chunks_mut(x_len)
        .zip(grad.par_chunks(c_out * n_out))
        .for_each_init(
            || vec![0.0f32; if g.is_pointwise() { 0 } else { k * n_out }],
            |dcol, (dxb, gb)| {
                let shape = (k, n_out, c_out);
                if g.is_pointwise() {
                    gemm(shape, dxb, false, weight, (k, 1), gb, (1, n_out));
                } else {
                    gemm(shape, dcol, false, weight, (k, 1), gb, (1, n_out));
                    col2im(dcol, c_in, g, dxb);
                }
            },
        );
    dx
}

/// Gradient w.r.t. the weight: `∂W = Σ_b ∂y_b·col(x_b)ᵀ`, one accumulator per thread.
pub fn weight_grad(x: &[f32], batch: usize, grad: &[f32], c_in: usize, c_out: usize, g: &Geometry) -> Vec<f32> {
    let (k, n_out, x_len) = dims(c_in, g);
    super::shared::sum_per_thread((x, x_len), (grad, c_out * n_out), batch, c_out * k, |xs, gs, acc| {
        let mut col = vec![0.0f32; if g.is_pointwise() { 0 } else { k * n_out }];
        for (xb, gb) in xs.chunks(x_len).zip(gs.chunks(c_out * n_out)) {
            let rhs: &[f32] = if g.is_pointwise() {
                xb
            } else {
                im2col(xb, c_in, g, &mut col);
                &col
            };
            gemm((c_out, k, n_out), acc, true, gb, (1, n_out), rhs, (n_out, 1));
        }
    })
}

/// Gradient w.r.t. the bias: the sum of `∂y` over the batch and the output map, per channel.
pub fn bias_grad(grad: &[f32], batch: usize, c_out: usize) -> Vec<f32> {
    let n_out = grad.len() / (batch * c_out).max(1);
    let mut db = vec![0.0f32; c_out];
    for gb in grad.chunks(c_out * n_out) {
        for (d, plane) in db.iter_mut().zip(gb.chunks(n_out)) {
            *d += plane.iter().sum::<f32>();
        }
    }
    db
}
