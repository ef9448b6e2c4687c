//! The compiler's public types, and upstream's feature narrowing.

#[cfg(feature = "nvptx")]
pub mod lowered_features;

use crate::target::LlvmTarget;
use cubecl_core::Compiler;
use cubecl_core::ir::amd::GfxArch;
#[cfg(feature = "nvptx")]
use cubecl_core::ir::nvidia::SmArch;
use cubecl_core::prelude::KernelDefinition;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::{
    compiler::CompilationError, config::compilation::F16Evaluation, kernel::BufferIOAttr,
};

#[cfg(feature = "nvptx")]
use crate::nvptx::ptx_version::PtxVersion;

/// Upstream's LLVM compiler; here every `compile` is refused (no LLVM in this build).
#[derive(Clone, Debug, Default)]
pub struct PlironCompiler {
    pub target: LlvmTarget,
}

/// Upstream's options, field for field, so that `cubecl-cuda` builds them unchanged.
#[derive(Clone, Debug, Default)]
pub struct PlironOptions {
    pub cpu_buffer_alignment: Option<u32>,
    pub arch: Option<GfxArch>,
    pub f16_evaluation: F16Evaluation,
    #[cfg(feature = "nvptx")]
    pub sm_arch: Option<SmArch>,
    #[cfg(feature = "nvptx")]
    pub ptx_version: Option<PtxVersion>,
    pub grid_constants: bool,
}

/// Compiled PTX module (upstream's fields; never produced here).
#[cfg(feature = "nvptx")]
#[derive(Clone, Debug)]
pub struct NvptxModule {
    /// NUL-terminated PTX assembly.
    pub ptx: Vec<core::ffi::c_char>,
    pub entrypoint: String,
    pub ir: String,
    pub shared_memory_size: usize,
    pub io: Vec<BufferIOAttr>,
}

/// Compiled kernel artifact. Upstream also has a CPU JIT engine; a value of this type is never
/// made here, since `compile` always fails.
#[derive(Clone, Debug)]
pub enum PlironArtifact {
    #[cfg(feature = "nvptx")]
    NvptxCode(NvptxModule),
}

impl core::fmt::Display for PlironArtifact {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            #[cfg(feature = "nvptx")]
            PlironArtifact::NvptxCode(module) => write!(f, "{}", module.ir),
            #[allow(unreachable_patterns)]
            _ => Ok(()),
        }
    }
}

/// What `compile` says: which backend this build has, and how to reach it.
pub const NO_LLVM: &str = "this build has no LLVM compiler (vendor/cubecl-llvm is a stand-in): \
    CUDA kernels are compiled by NVRTC, which cubecl-cuda's `cpp` feature selects";

impl Compiler for PlironCompiler {
    type Representation = PlironArtifact;
    type CompilationOptions = PlironOptions;

    fn buffer_io(repr: &Self::Representation) -> Option<Vec<BufferIOAttr>> {
        match repr {
            #[cfg(feature = "nvptx")]
            PlironArtifact::NvptxCode(module) => Some(module.io.clone()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    fn compile(
        &mut self,
        _kernel: KernelDefinition,
        _options: &Self::CompilationOptions,
    ) -> Result<Self::Representation, CompilationError> {
        Err(CompilationError::Generic {
            reason: NO_LLVM.to_string(),
            backtrace: BackTrace::capture(),
        })
    }

    fn extension(&self) -> &'static str {
        "ll"
    }

    fn lang_tag(&self) -> &'static str {
        match self.target {
            LlvmTarget::Cpu => "mlir",
            #[cfg(feature = "nvptx")]
            LlvmTarget::Nvptx => "llvm",
        }
    }
}
