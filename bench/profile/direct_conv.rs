//! C2F2's second convolution (batch 256, 32→64 channels, 5×5, 14×14, padding 2): the direct
//! AVX-512 kernels against im2col + GEMM, forward and both gradients, median of 9 runs each,
//! the two paths interleaved so that machine noise hits both.
use rdml::kernel::{Geometry, conv, direct};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (n, c_in, c_out) = (256, 32, 64);
    let g = Geometry::new([1, 1], [(2, 2), (2, 2)], [1, 1], [5, 5], [14, 14]).expect("geometry");
    let s = g.direct(c_in, c_out).expect("stride 1");
    let x: Vec<f32> = (0..n * c_in * 196)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let w: Vec<f32> = (0..c_out * c_in * 25)
        .map(|i| ((i * 104729) % 997) as f32 / 997.0 - 0.5)
        .collect();
    let dy: Vec<f32> = (0..n * c_out * 196)
        .map(|i| ((i * 31) % 101) as f32 / 101.0 - 0.5)
        .collect();
    let mut t = vec![vec![]; 6];
    for _ in 0..9 {
        let runs: [&dyn Fn() -> Vec<f32>; 6] = [
            &|| conv::forward(&x, n, &w, c_out, None, &g),
            &|| direct::forward(&x, n, &w, None, &s),
            &|| conv::input_grad(&dy, n, &w, c_in, c_out, &g),
            &|| direct::input_grad(&dy, n, &w, &s),
            &|| conv::weight_grad(&x, n, &dy, c_in, c_out, &g),
            &|| direct::weight_grad(&x, n, &dy, &s),
        ];
        for (k, f) in runs.iter().enumerate() {
            let s = Instant::now();
            std::hint::black_box(f());
            t[k].push(s.elapsed().as_secs_f64() * 1e3);
        }
    }
    let gflop = 2.0 * (n * c_out * 196 * c_in * 25) as f64 / 1e9;
    for (k, name) in ["forward", "input grad", "weight grad"].iter().enumerate() {
        let (a, b) = (median(t[2 * k].clone()), median(t[2 * k + 1].clone()));
        println!(
            "{name:12} im2col {a:6.1} ms ({:5.1} GFLOP/s)  direct {b:6.1} ms ({:5.1} GFLOP/s)",
            gflop / a * 1e3,
            gflop / b * 1e3
        );
    }
}
