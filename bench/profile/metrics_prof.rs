//! Times rdml's retrieval metrics on sphere embeddings (bench/profile/common/sphere.rs).
//! Usage: cargo run --release --example metrics_prof -- N C D [REPEATS]
use anyhow::Result;
use std::time::Instant;

#[path = "common/sphere.rs"]
mod sphere;

fn main() -> Result<()> {
    let (n, c, d, reps) = sphere::args()?;
    let (e, labels) = sphere::embeddings(n, c, d)?;
    for _ in 0..reps {
        let t = Instant::now();
        let m = rdml::eval::metrics::retrieval(&e, &labels, None, &[1], &rdml::default_device())?;
        println!(
            "{:.3} s  R@1 {:.4} MAP@R {:.4} mAP {:.4}",
            t.elapsed().as_secs_f64(),
            m.recall[0].1,
            m.map_at_r,
            m.map
        );
    }
    Ok(())
}
