//! Times rdml's fused-chain dot products (kernel::dots) against the gemm crate on one thread,
//! for `a·bᵀ` of random rows. Usage: cargo run --release --example dots_bench -- RA RB D
use std::time::Instant;

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().expect("a number")).collect();
    let (ra, rb, d) = (a[0], a[1], a[2]);
    let x: Vec<f32> = (0..ra * d).map(|i| ((i * 7919) % 1000) as f32 / 1000.0).collect();
    let y: Vec<f32> = (0..rb * d).map(|i| ((i * 104729) % 997) as f32 / 997.0).collect();
    let mut out = vec![0f32; ra * rb];
    let flops = 2.0 * (ra * rb * d) as f64;
    let (mut best_d, mut best_g) = (f64::MAX, f64::MAX);
    for _ in 0..10 {
        let t = Instant::now();
        rdml::kernel::dots::dots(&x, &y, d, &mut out, rb);
        let s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        // SAFETY: shapes as in scan_rows_host.
        unsafe {
            gemm::gemm(
                ra,
                rb,
                d,
                out.as_mut_ptr(),
                1,
                rb as isize,
                false,
                x.as_ptr(),
                1,
                d as isize,
                y.as_ptr(),
                d as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        let g = t.elapsed().as_secs_f64();
        best_d = best_d.min(s);
        best_g = best_g.min(g);
    }
    println!(
        "best of 10: dots {:.1} GFLOP/s, gemm {:.1} GFLOP/s",
        flops / best_d / 1e9,
        flops / best_g / 1e9
    );
}
