//! rdml's 2×2/2 max-pool forward on C2F2's two pooling shapes (batch 256): best wall and process
//! CPU time of 15 runs (CPU time leaves out a virtual machine's stolen time). `--tuned` first
//! calls `rdml::tune_allocator()`, as the `rdml` binary does, to show what reusing freed buffers
//! saves. Usage: cargo run --release --example pool_kernel [-- --tuned]
use rdml::kernel::{PoolGeometry, pool};
use std::time::Instant;

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cpu_seconds() -> f64 {
    f64::NAN
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn main() {
    let tuned = std::env::args().any(|a| a == "--tuned");
    if tuned {
        rdml::tune_allocator();
    }
    for (c, hw) in [(32usize, 28usize), (64, 14)] {
        let g = PoolGeometry::new([2, 2], [2, 2], [0, 0], [hw, hw]).expect("geometry");
        let x: Vec<f32> = (0..256 * c * hw * hw)
            .map(|i| ((i as u64 * 2654435761) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let (mut wall, mut cpu) = (f64::MAX, f64::MAX);
        for _ in 0..15 {
            let (t, c0) = (Instant::now(), cpu_seconds());
            std::hint::black_box(pool::forward(&x, &g));
            wall = wall.min(t.elapsed().as_secs_f64());
            cpu = cpu.min(cpu_seconds() - c0);
        }
        println!(
            "max-pool 256x{c}x{hw}x{hw} (tuned allocator: {tuned}): wall {:.2} ms, CPU {:.2} ms",
            wall * 1e3,
            cpu * 1e3
        );
    }
}
