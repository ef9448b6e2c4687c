//! What a user asks for (`--device`, `train.device`) and what rdml opened: the device, its
//! description, and the Vulkan adapters it can list.

use anyhow::{Result, bail};
use burn::tensor::Device;
use std::fmt;
use std::str::FromStr;

/// What a user asked for with `--device` or `train.device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    #[default]
    Cpu,
    /// An NVIDIA GPU through CUDA: `None` is device 0, `Some(n)` the n-th CUDA device.
    Cuda(Option<usize>),
    /// A Vulkan adapter: `None` lets the driver pick the most capable one, `Some(n)` is the
    /// n-th adapter in `rdml devices`' list.
    Vulkan(Option<usize>),
    /// CUDA's first device, else the first Vulkan GPU (not a software rasteriser), else the CPU.
    Auto,
}

impl FromStr for DeviceChoice {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let indexed = |prefix: &str| s.strip_prefix(prefix).map(str::parse::<usize>);
        Ok(match s.as_str() {
            "cpu" | "flex" => Self::Cpu,
            "cuda" => Self::Cuda(None),
            "vulkan" | "gpu" => Self::Vulkan(None),
            "auto" => Self::Auto,
            _ => match (indexed("cuda:"), indexed("vulkan:")) {
                (Some(Ok(n)), _) => Self::Cuda(Some(n)),
                (_, Some(Ok(n))) => Self::Vulkan(Some(n)),
                _ => {
                    // burn's ROCm backend cannot be built here (its build downloads LLVM); AMD
                    // GPUs are reached through their Vulkan driver.
                    let hint = match s.as_str() {
                        "rocm" | "hip" => " (AMD GPUs run through their Vulkan driver: use vulkan)",
                        _ => "",
                    };
                    bail!(
                        "device '{s}': expected cpu, cuda, cuda:N, vulkan, vulkan:N (N = 0, 1, …; see `rdml devices`) or auto{hint}"
                    )
                }
            },
        })
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(None) => write!(f, "cuda"),
            Self::Cuda(Some(n)) => write!(f, "cuda:{n}"),
            Self::Vulkan(None) => write!(f, "vulkan"),
            Self::Vulkan(Some(n)) => write!(f, "vulkan:{n}"),
            Self::Auto => write!(f, "auto"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for DeviceChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|e: anyhow::Error| serde::de::Error::custom(e))
    }
}

impl serde::Serialize for DeviceChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A device ready for tensors, with the words that say which it is.
#[derive(Debug, Clone)]
pub struct Selected {
    pub device: Device,
    /// E.g. `cpu (Flex, 2 threads)` or `vulkan:0 (NVIDIA H100, discrete GPU, NVIDIA 570.86)`.
    pub description: String,
    pub is_gpu: bool,
}

/// One Vulkan adapter of this machine, as `rdml devices` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    /// Its place in the list: `vulkan:index`.
    pub index: usize,
    pub name: String,
    /// `discrete GPU`, `integrated GPU`, `virtual GPU`, `CPU (software)` or `other`.
    pub kind: &'static str,
    pub driver: String,
    /// A real GPU, not a software implementation such as Mesa's lavapipe.
    pub is_gpu: bool,
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vulkan:{} ({}, {}", self.index, self.name, self.kind)?;
        if !self.driver.is_empty() {
            write!(f, ", {}", self.driver)?;
        }
        write!(f, ")")
    }
}
