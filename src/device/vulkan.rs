//! Vulkan devices: burn's wgpu runtime on Vulkan (SPIR-V kernels), in a build with the `vulkan`
//! feature; without it, every call says which feature to build with.

use super::choice::{Adapter, Selected};
#[allow(unused_imports)]
use anyhow::{Result, bail};
#[allow(unused_imports)]
use burn::tensor::Device;

pub(super) use imp::{adapters, open};

#[cfg(not(feature = "vulkan"))]
const NO_FEATURE: &str = "this rdml was built without Vulkan support; build it with ⟨+vulkan⟩ \
     (needs a Vulkan driver at run time)";

#[cfg(not(feature = "vulkan"))]
mod imp {
    use super::*;

    pub fn open(_index: Option<usize>) -> Result<Selected> {
        bail!("⟨device⟩ vulkan: {}", super::NO_FEATURE)
    }

    pub fn adapters() -> Result<Vec<Adapter>> {
        bail!("{}", super::NO_FEATURE)
    }
}

#[cfg(feature = "vulkan")]
mod imp {
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
                "⟨device⟩ vulkan:{n}: this machine has {} Vulkan device(s): {}",
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
