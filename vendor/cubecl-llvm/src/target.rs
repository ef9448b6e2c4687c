//! LLVM compilation targets (upstream's enum, without its context plumbing).

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LlvmTarget {
    #[default]
    Cpu,
    #[cfg(feature = "nvptx")]
    Nvptx,
}

impl LlvmTarget {
    /// Whether the target provides a hardware launch grid.
    pub fn is_gpu(self) -> bool {
        !matches!(self, LlvmTarget::Cpu)
    }
}
