//! rdml: robust deep metric learning. Train embedding models, evaluate their retrieval quality,
//! attack them and harden them, on the CPU (burn's Flex backend) or a GPU.
//!
//! The library is what the `rdml` command runs; every command is a thin layer over these modules.
//!
//! The layers: a module uses only its own layer's earlier modules and the layers before it (no
//! import points up, no two modules import each other). `tools/modules.py` reads this list (each
//! numbered item's module names in backticks) and checks both in CI, and that every module of
//! this file is in one layer:
//! 1. `fault` (injected faults for tests), `field` (option names, rendered by each front end),
//!    `host`, `read` (every file read: by type and size, bookkeeping never through a link),
//!    `atomic` (files written whole), `output`, `run_dir`, `owned` (ledgers of what rdml wrote),
//!    `out_folder` (a scored model's `out` folder), `ranks` (the process group a scoring job is
//!    split over), `notes` (warnings and notes, to the front
//!    end's sink), `progress`, `device`, `kernel`, `data`, `kinds`;
//! 2. `model`, `loss` (one file per loss behind `loss::Loss`);
//! 3. `eval`;
//! 4. `attack` (one engine, objectives, units behind `attack::Attack`, the suite), `tables`
//!    (its text tables), `certify` (certified Recall@1 by randomized smoothing of the query);
//! 5. `defense` (one file per defense behind `defense::Defense`);
//! 6. `config`, `train`;
//! 7. the pipelines: `import` (a PyTorch model made a run folder), `target` (a run opened as an
//!    attack target), `grid` (the report's stored retrieval grid), `scoring` (one scoring
//!    session — a run folder, or a model held outside rdml as an oracle on the caller's images —
//!    its options resolved once, its record built once), `quickstart`, `compare`, `embed`, `html`
//!    (the report, from records alone), `job` (the library's requests, one per job);
//! 8. `harden` (the in-loop sessions: a defense or a loss inside a caller's own training loop);
//! 9. `wire` (the Python front end's half in the library: JSON requests and float32 arrays);
//! 10. the command line (`src/cli/`, in the binary).

pub mod atomic;
pub mod attack;
pub mod certify;
pub mod compare;
pub mod config;
pub mod data;
pub mod defense;
pub mod device;
pub mod embed;
pub mod eval;
pub mod fault;
pub mod field;
pub mod grid;
pub mod harden;
pub mod host;
pub mod html;
pub mod import;
pub mod job;
pub mod kernel;
mod kinds;
pub mod loss;
pub mod model;
pub mod notes;
pub mod out_folder;
pub mod output;
pub mod owned;
pub mod progress;
pub mod quickstart;
pub mod ranks;
pub mod read;
pub mod run_dir;
pub mod scoring;
pub mod tables;
pub mod target;
pub mod train;
pub mod wire;

/// An error in what the caller passed (an image, a label, a keyword, a model's answer), as told
/// apart from a failure of the machine or the disk: a front end shows it as its own kind of error
/// (the Python package: `ValueError`). The message names the field.
#[derive(Debug)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// An [`InputError`] as an `anyhow` error.
pub fn input_error(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InputError(msg.into()))
}

/// A file or folder the caller named that is not there: an `io::Error` of kind `NotFound` (a
/// front end tells it apart: the Python package's `FileNotFoundError`), with rdml's message.
pub fn not_found(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(std::io::Error::new(std::io::ErrorKind::NotFound, msg.into()))
}

/// Whether `e` says a file or folder is not there (an `io::Error` of kind `NotFound` anywhere in
/// its chain: [`not_found`]'s, or the system's).
pub fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    })
}

/// `Err(input_error(...))` unless `cond`.
#[macro_export]
macro_rules! ensure_input {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::input_error(format!($($arg)+)));
        }
    };
}

/// The CPU device (burn's Flex backend, rdml's own kernels). Named explicitly rather than
/// `Device::default()`, which in a build with the `vulkan` feature is the GPU; a GPU is chosen
/// at run time with [`device::select`].
pub fn default_device() -> burn::tensor::Device {
    burn::tensor::Device::flex()
}

/// Runs `draw` right after seeding `device`'s generator, holding a process-wide lock: burn's
/// generator is global to the device, so two threads that seed and draw at once (parallel tests,
/// a library user's worker threads) would interleave their draws and lose reproducibility.
/// The CPU's generator is seeded too: models and random starts are drawn there and moved (see
/// [`host_random`], `EmbeddingNet::new`), so a seed gives the same run on every device.
pub fn seeded<T>(device: &burn::tensor::Device, seed: u64, draw: impl FnOnce() -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let host = default_device();
    if device.clone().without_autodiff() != host {
        host.seed(seed);
    }
    device.seed(seed);
    draw()
}

/// `Tensor::random(shape, distribution)` drawn on the CPU under `seed` (see [`seeded`]) and moved
/// to `device`: every backend has its own generator, and a seed must give the same numbers on
/// every device.
pub fn host_random<const D: usize>(
    seed: u64,
    shape: impl Into<burn::tensor::Shape>,
    distribution: burn::tensor::Distribution,
    device: &burn::tensor::Device,
) -> burn::tensor::Tensor<D> {
    let host = default_device();
    let t = seeded(&host, seed, || {
        burn::tensor::Tensor::<D>::random(shape, distribution, &host)
    });
    let t = if t.device() == *device { t } else { t.to_device(device) };
    // `to_device` keeps the tensor's own autodiff context; take the device's.
    if device.is_autodiff() {
        t.autodiff()
    } else {
        t.without_autodiff()
    }
}

/// Keeps freed tensor buffers (up to 32 MiB each) in the process heap instead of returning them
/// to the kernel, for glibc's allocator; elsewhere a no-op. Call once, first thing in `main`.
///
/// Why: glibc maps each large buffer afresh and unmaps it on free, so every tensor of a training
/// step (C2F2's first activation: 25 MiB at batch 256) is page-faulted in and zeroed by the
/// kernel on every step; with the buffers reused, C2F2's first max-pool took 8 ms of CPU instead
/// of 16 (`examples/pool_kernel`). The cost is a resident set that stays at its peak.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}
