//! rdml: robust deep metric learning. Train embedding models, evaluate their retrieval quality,
//! attack them and harden them, on the CPU (burn's Flex backend) or a GPU.
//!
//! The library is what the `rdml` command runs; every command is a thin layer over these modules.

pub mod attack;
pub mod compare;
pub mod config;
pub mod data;
pub mod defense;
pub mod eval;
pub mod kernel;
pub mod loss;
pub mod model;
pub mod report;
pub mod train;

/// The compute device: burn's Flex CPU backend unless a GPU feature selects another.
pub fn default_device() -> burn::tensor::Device {
    burn::tensor::Device::default()
}

/// Runs `draw` right after seeding `device`'s generator, holding a process-wide lock: burn's
/// generator is global to the device, so two threads that seed and draw at once (parallel tests,
/// a library user's worker threads) would interleave their draws and lose reproducibility.
pub fn seeded<T>(device: &burn::tensor::Device, seed: u64, draw: impl FnOnce() -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    device.seed(seed);
    draw()
}
