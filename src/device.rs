//! The compute device, chosen at run time: `cpu` (burn's Flex backend with rdml's own kernels),
//! `vulkan` / `vulkan:N` (burn's wgpu backend on Vulkan, in a build with the `vulkan` feature) or
//! `auto` (the first Vulkan GPU, else the CPU).
//!
//! Nothing downstream depends on the device: models are initialised and random starts drawn on
//! the CPU and then moved, so a seed gives the same run on every device, and checkpoints hold
//! host values.

use anyhow::{Result, bail};
use burn::tensor::Device;
use std::fmt;
use std::str::FromStr;

/// What a user asked for with `--device` or `train.device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    #[default]
    Cpu,
    /// A Vulkan adapter: `None` lets the driver pick the most capable one, `Some(n)` is the
    /// n-th adapter in `rdml devices`' list.
    Vulkan(Option<usize>),
    /// The first Vulkan GPU (not a software rasteriser), else the CPU.
    Auto,
}

impl FromStr for DeviceChoice {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        Ok(match s.as_str() {
            "cpu" | "flex" => Self::Cpu,
            "vulkan" | "gpu" => Self::Vulkan(None),
            "auto" => Self::Auto,
            _ => match s.strip_prefix("vulkan:").map(str::parse::<usize>) {
                Some(Ok(n)) => Self::Vulkan(Some(n)),
                _ => {
                    // burn's CUDA and ROCm backends cannot be built here (their build downloads
                    // LLVM); NVIDIA and AMD GPUs are reached through their Vulkan drivers.
                    let hint = match s.as_str() {
                        "cuda" | "rocm" | "hip" => " (NVIDIA and AMD GPUs run through their Vulkan driver: use vulkan)",
                        _ => "",
                    };
                    bail!(
                        "device '{s}': expected cpu, vulkan, vulkan:N (N = 0, 1, …; see `rdml devices`) or auto{hint}"
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

/// Whether this build has a GPU backend (the `vulkan` feature).
pub const VULKAN_BUILT: bool = cfg!(feature = "vulkan");

#[cfg(not(feature = "vulkan"))]
const NO_FEATURE: &str = "this rdml was built without GPU support; build it with \
     `cargo build --release --features vulkan` (needs a Vulkan driver at run time)";

fn cpu() -> Selected {
    Selected {
        device: crate::default_device(),
        description: format!("cpu (Flex, {} threads)", rayon::current_num_threads()),
        is_gpu: false,
    }
}

/// Opens the device a user asked for. `auto` never fails: without a Vulkan GPU it takes the CPU
/// and says why in the description.
pub fn select(choice: DeviceChoice) -> Result<Selected> {
    match choice {
        DeviceChoice::Cpu => Ok(cpu()),
        DeviceChoice::Vulkan(index) => vulkan::open(index),
        DeviceChoice::Auto => {
            if !VULKAN_BUILT {
                let mut s = cpu();
                s.description += "; auto: this build has no GPU support (--features vulkan)";
                return Ok(s);
            }
            let gpu = vulkan::adapters().ok().and_then(|a| a.into_iter().find(|a| a.is_gpu));
            match gpu {
                Some(a) => vulkan::open(Some(a.index)),
                None => {
                    let mut s = cpu();
                    s.description += "; auto: no Vulkan GPU found";
                    Ok(s)
                }
            }
        }
    }
}

/// The Vulkan adapters this machine offers (empty list or an error saying what is missing).
pub fn adapters() -> Result<Vec<Adapter>> {
    vulkan::adapters()
}

/// Turns a failure message into advice when it is the GPU running out of memory.
pub fn out_of_memory_advice(message: &str) -> Option<String> {
    let m = message.to_ascii_lowercase().replace(['-', '_'], " ");
    let oom = m.contains("out of memory") || m.contains("outofmemory") || m.contains("out of device memory");
    oom.then(|| {
        "the device ran out of memory: lower the batch size (train.sampler.pairs, or \
         train.sampler.classes × per_class, for training; eval.batch_size for evaluation; \
         --batch for attack, robustness and compare) or use a device with more memory; a run \
         stopped here resumes from its last finished epoch with --resume"
            .to_string()
    })
}

#[cfg(not(feature = "vulkan"))]
mod vulkan {
    use super::*;

    pub fn open(_index: Option<usize>) -> Result<Selected> {
        bail!("--device vulkan: {NO_FEATURE}")
    }

    pub fn adapters() -> Result<Vec<Adapter>> {
        bail!("{NO_FEATURE}")
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    use super::*;
    use anyhow::Context;
    use burn::tensor::DeviceKind;
    use burn::tensor::wgpu::{WgpuBackend, wgpu};
    use std::sync::Mutex;

    /// The adapter list (read once) and the devices opened so far, behind one lock: the Vulkan
    /// loader crashes when instances are created on several threads at once, and burn's wgpu
    /// runtime can be initialised once per adapter.
    struct State {
        infos: Option<Vec<wgpu::AdapterInfo>>,
        opened: Vec<(usize, Selected)>,
    }
    static STATE: Mutex<State> = Mutex::new(State {
        infos: None,
        opened: Vec::new(),
    });

    fn state() -> std::sync::MutexGuard<'static, State> {
        STATE.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        // wgpu's native futures are ready when first polled.
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::yield_now();
        }
    }

    /// Whether the Vulkan loader can be found, so that "no loader" and "no driver" read apart.
    fn loader_present() -> bool {
        #[cfg(target_os = "linux")]
        {
            let name = c"libvulkan.so.1";
            // SAFETY: dlopen with a constant name; the handle is released right away.
            unsafe {
                let h = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                if h.is_null() {
                    return false;
                }
                libc::dlclose(h);
            }
            true
        }
        #[cfg(not(target_os = "linux"))]
        true
    }

    fn infos(state: &mut State) -> Vec<wgpu::AdapterInfo> {
        if let Some(i) = &state.infos {
            return i.clone();
        }
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let list: Vec<_> = block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
            .iter()
            .map(wgpu::Adapter::get_info)
            .collect();
        state.infos = Some(list.clone());
        list
    }

    pub fn adapters() -> Result<Vec<Adapter>> {
        describe(&infos_checked(&mut state())?)
    }

    fn infos_checked(state: &mut State) -> Result<Vec<wgpu::AdapterInfo>> {
        if !loader_present() {
            bail!(
                "no Vulkan loader (libvulkan.so.1) on this machine: install it with a driver \
                 (NVIDIA's, or Mesa's software one: apt-get install libvulkan1 mesa-vulkan-drivers)"
            );
        }
        Ok(infos(state))
    }

    fn describe(infos: &[wgpu::AdapterInfo]) -> Result<Vec<Adapter>> {
        Ok(infos
            .iter()
            .cloned()
            .enumerate()
            .map(|(index, a)| {
                let (kind, is_gpu) = match a.device_type {
                    wgpu::DeviceType::DiscreteGpu => ("discrete GPU", true),
                    wgpu::DeviceType::IntegratedGpu => ("integrated GPU", true),
                    wgpu::DeviceType::VirtualGpu => ("virtual GPU", true),
                    wgpu::DeviceType::Cpu => ("CPU (software)", false),
                    wgpu::DeviceType::Other => ("other", false),
                };
                let driver = format!("{} {}", a.driver, a.driver_info).trim().to_string();
                Adapter {
                    index,
                    name: a.name,
                    kind,
                    driver,
                    is_gpu,
                }
            })
            .collect())
    }

    /// The runtime's selector for the `index`-th adapter: wgpu counts each device type apart.
    fn kind_of(all: &[wgpu::AdapterInfo], index: usize) -> DeviceKind {
        let ty = all[index].device_type;
        let nth = all[..index].iter().filter(|a| a.device_type == ty).count();
        match ty {
            wgpu::DeviceType::DiscreteGpu => DeviceKind::DiscreteGpu(nth),
            wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu(nth),
            wgpu::DeviceType::VirtualGpu => DeviceKind::VirtualGpu(nth),
            wgpu::DeviceType::Cpu => DeviceKind::Cpu,
            wgpu::DeviceType::Other => DeviceKind::DefaultDevice,
        }
    }

    pub fn open(index: Option<usize>) -> Result<Selected> {
        let mut state = state();
        let all = infos_checked(&mut state)?;
        let list = describe(&all)?;
        if list.is_empty() {
            bail!(
                "no Vulkan device found: the loader is present but no driver answered (on an NVIDIA \
                 machine, the driver's Vulkan ICD; elsewhere Mesa's: apt-get install mesa-vulkan-drivers)"
            );
        }
        // With no index, the most capable adapter: the first GPU, else the first of the list.
        let index = match index {
            Some(n) if n >= list.len() => bail!(
                "--device vulkan:{n}: this machine has {} Vulkan device(s): {}",
                list.len(),
                list.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("; ")
            ),
            Some(n) => n,
            None => list.iter().find(|a| a.is_gpu).map_or(0, |a| a.index),
        };
        if let Some((_, s)) = state.opened.iter().find(|(i, _)| *i == index) {
            return Ok(s.clone());
        }
        let device = Device::wgpu_options()
            .device_kind(kind_of(&all, index))
            .graphics_api(WgpuBackend::Vulkan)
            .init()
            .with_context(|| format!("cannot open {}", list[index]))?;
        let selected = Selected {
            device,
            description: list[index].to_string(),
            is_gpu: list[index].is_gpu,
        };
        state.opened.push((index, selected.clone()));
        Ok(selected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling_and_rejects_the_rest() {
        assert_eq!("cpu".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
        assert_eq!("Vulkan".parse::<DeviceChoice>().unwrap(), DeviceChoice::Vulkan(None));
        assert_eq!(
            "vulkan:2".parse::<DeviceChoice>().unwrap(),
            DeviceChoice::Vulkan(Some(2))
        );
        assert_eq!("auto".parse::<DeviceChoice>().unwrap(), DeviceChoice::Auto);
        for bad in ["cuda", "vulkan:", "vulkan:-1", "vulkan:x", ""] {
            let e = bad.parse::<DeviceChoice>().unwrap_err().to_string();
            assert!(e.contains("expected cpu, vulkan, vulkan:N"), "{bad}: {e}");
        }
        assert_eq!(DeviceChoice::Vulkan(Some(3)).to_string(), "vulkan:3");
        let e = "cuda".parse::<DeviceChoice>().unwrap_err().to_string();
        assert!(e.contains("use vulkan"), "{e}");
    }

    #[test]
    fn auto_always_opens_something_and_cpu_is_flex() {
        let s = select(DeviceChoice::Auto).unwrap();
        assert!(!s.description.is_empty());
        assert_eq!(select(DeviceChoice::Cpu).unwrap().device, Device::flex());
    }

    #[cfg(not(feature = "vulkan"))]
    #[test]
    fn vulkan_without_the_feature_names_the_feature() {
        let e = select(DeviceChoice::Vulkan(None)).unwrap_err().to_string();
        assert!(e.contains("--features vulkan"), "{e}");
    }

    #[test]
    fn out_of_memory_is_told_apart() {
        let a = out_of_memory_advice("An out-of-memory error happened during launch: OutOfMemory { size: 1 }");
        assert!(a.unwrap().contains("lower the batch size"));
        assert!(out_of_memory_advice("shape mismatch").is_none());
    }
}
