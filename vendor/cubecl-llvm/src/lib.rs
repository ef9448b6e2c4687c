//! A stand-in for `cubecl-llvm` 0.11.3 that needs no LLVM (see `vendor/README.md`).
//!
//! `cubecl-cuda` 0.11.3 names this crate in four places: the PTX version for the driver
//! (`nvptx::ptx_version`), the narrowing of device features for the LLVM backend
//! (`shared::lowered_features`), and the LLVM compiler types of its `CudaCompiler::Llvm` arm.
//! The first two are the upstream files, unchanged. The compiler keeps the upstream types and
//! fields, and its `compile` returns a compilation error: rdml turns on `cubecl-cuda/cpp`, which
//! makes NVRTC the backend every CUDA device compiles with, so the LLVM arm is never taken.

#[cfg(feature = "amdgpu")]
compile_error!(
    "vendor/cubecl-llvm is a stand-in for CUDA's NVRTC route only; the AMD GPU target needs the \
     real cubecl-llvm (remove the [patch.crates-io] entry)"
);

#[cfg(feature = "nvptx")]
pub mod nvptx {
    //! The parts of the NVPTX target that are plain Rust.
    pub mod ptx_version;
}

pub mod shared;
pub mod target;

#[cfg(feature = "nvptx")]
pub use shared::NvptxModule;
pub use shared::{PlironArtifact, PlironCompiler, PlironOptions};
pub use target::LlvmTarget;
