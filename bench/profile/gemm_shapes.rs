//! Single-thread GEMM throughput of the gemm crate on convolution-shaped problems.
use std::time::Instant;

fn run(m: usize, n: usize, k: usize, lhs_t: bool) {
    let a = vec![0.5f32; m * k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0.0f32; m * n];
    let (lcs, lrs) = if lhs_t { (m as isize, 1) } else { (1, k as isize) };
    let reps = (2e9 / (2.0 * (m * n * k) as f64)).ceil() as usize;
    let s = Instant::now();
    for _ in 0..reps {
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                lcs,
                lrs,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
    let secs = s.elapsed().as_secs_f64();
    println!(
        "m {m:5} n {n:6} k {k:6} lhsT {lhs_t}: {:.1} GFLOP/s",
        2.0 * (m * n * k * reps) as f64 / secs / 1e9
    );
}

fn main() {
    run(64, 196, 800, false);
    run(64, 784, 800, false);
    run(64, 1568, 800, false);
    run(800, 196, 64, true);
    run(800, 1568, 64, true);
    run(32, 784, 25, false);
    run(32, 6272, 25, false);
    run(256, 1024, 3136, false);
}
