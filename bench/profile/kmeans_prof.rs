//! Times NMI's k-means alone on sphere embeddings (bench/profile/common/sphere.rs).
//! Usage: cargo run --release --example kmeans_prof -- N C D [REPEATS]
use anyhow::Result;
use std::time::Instant;

#[path = "common/sphere.rs"]
mod sphere;

fn main() -> Result<()> {
    let (n, c, d, reps) = sphere::args()?;
    let (e, labels) = sphere::embeddings(n, c, d)?;
    for _ in 0..reps {
        let t = Instant::now();
        let a = rdml::eval::cluster::kmeans(&e, c, 25, 0, &rdml::default_device())?;
        println!(
            "{:.3} s  NMI {:.4}",
            t.elapsed().as_secs_f64(),
            rdml::eval::cluster::nmi(&a, &labels)
        );
    }
    Ok(())
}
