//! NVIDIA GPUs through burn's CUDA runtime (cubecl-cuda), kernels compiled at run time by NVRTC,
//! in a build with the `cuda` feature.
//!
//! cubecl-cuda panics on each missing piece of a CUDA installation (cudarc's loader on a missing
//! library, an `expect` on missing headers), so rdml looks for every piece first
//! ([`CudaProbe`]) and turns what is missing into one line that says how to fix it.

use super::choice::Selected;
use anyhow::{Result, bail};
use std::fmt;
use std::path::PathBuf;

/// One CUDA device, as `rdml devices` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaGpu {
    /// Its CUDA ordinal: `cuda:index`.
    pub index: usize,
    pub name: String,
    pub memory_bytes: u64,
    /// (major, minor): 9.0 for an H100.
    pub compute_capability: (i32, i32),
}

impl fmt::Display for CudaGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        write!(
            f,
            "cuda:{} ({}, {:.1} GiB, compute capability {major}.{minor})",
            self.index,
            self.name,
            self.memory_bytes as f64 / (1u64 << 30) as f64
        )
    }
}

/// What the CUDA runtime needs at run time, as found on this machine.
#[derive(Debug, Clone)]
pub struct CudaProbe {
    /// The driver's library (`libcuda.so.1`) loads.
    pub driver: bool,
    /// NVRTC's library (`libnvrtc.so` or `libnvrtc.so.13`) loads.
    pub nvrtc: bool,
    /// The CUDA folder the runtime takes its headers from, as cubecl-cuda looks for it:
    /// `$CUDA_PATH`, else `/usr/local/cuda`, `/opt/cuda`, or `/usr` when `/usr/bin/nvcc` exists.
    pub toolkit: Option<PathBuf>,
    /// The headers NVRTC includes in every kernel are under `toolkit/include`.
    pub headers: bool,
    /// The devices the driver reports, or its error (only asked when the driver loads).
    pub devices: std::result::Result<Vec<CudaGpu>, String>,
}

/// Headers every kernel of cubecl-cuda includes (`cubecl-cpp/src/cuda/ty.rs`).
const HEADERS: [&str; 2] = ["cuda_fp16.h", "mma.h"];

impl CudaProbe {
    /// The first missing piece as one line with its fix; `None` when CUDA can run.
    pub fn missing(&self) -> Option<String> {
        if !self.driver {
            return Some(
                "no NVIDIA driver: libcuda.so.1 was not found (install the NVIDIA driver; in a \
                 container, start it with the GPU exposed, e.g. `docker run --gpus all`)"
                    .into(),
            );
        }
        if !self.nvrtc {
            return Some(
                "no NVRTC: libnvrtc.so (or libnvrtc.so.13) was not found; rdml compiles its CUDA \
                 kernels at run time with it. Install the CUDA 13 toolkit (or `pip install \
                 nvidia-cuda-nvrtc`) and put the folder holding libnvrtc on LD_LIBRARY_PATH"
                    .into(),
            );
        }
        match (&self.toolkit, self.headers) {
            (None, _) => {
                return Some(format!(
                    "no CUDA headers: NVRTC needs {} from the CUDA toolkit, and none was found \
                     (CUDA_PATH is unset, and /usr/local/cuda, /opt/cuda and /usr/bin/nvcc do not \
                     exist); set CUDA_PATH to the toolkit's folder (the one holding include/{})",
                    HEADERS.join(", "),
                    HEADERS[0]
                ));
            }
            (Some(dir), false) => {
                return Some(format!(
                    "no CUDA headers: {} has no include/{} or include/{}; set CUDA_PATH to the CUDA \
                     toolkit's folder (the one holding include/{})",
                    dir.display(),
                    HEADERS[0],
                    HEADERS[1],
                    HEADERS[0]
                ));
            }
            _ => {}
        }
        match &self.devices {
            Err(e) => Some(format!("the NVIDIA driver did not start: {e}")),
            Ok(list) if list.is_empty() => {
                Some("no CUDA device: the NVIDIA driver is present but reports no GPU".into())
            }
            Ok(_) => None,
        }
    }

    /// The devices, or the missing piece as an error.
    pub fn gpus(&self) -> Result<Vec<CudaGpu>> {
        match (self.missing(), &self.devices) {
            (Some(m), _) => bail!("{m}"),
            (None, Ok(list)) => Ok(list.clone()),
            (None, Err(e)) => bail!("{e}"),
        }
    }

    /// The device `--device cuda[:index]` names (`None`: the first).
    pub fn pick(&self, index: Option<usize>) -> Result<CudaGpu> {
        let list = self.gpus()?;
        let n = index.unwrap_or(0);
        match list.get(n) {
            Some(g) => Ok(g.clone()),
            None => bail!(
                "⟨device⟩ cuda:{n}: this machine has {} CUDA device(s): {}",
                list.len(),
                list.iter().map(|g| g.to_string()).collect::<Vec<_>>().join("; ")
            ),
        }
    }
}

pub(super) use imp::{devices, open};

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::*;

    const NO_FEATURE: &str = "this rdml was built without CUDA; build it with ⟨+cuda⟩ (needs the NVIDIA \
        driver, NVRTC and the CUDA headers at run time)";

    pub fn open(index: Option<usize>) -> Result<Selected> {
        let choice = super::super::choice::DeviceChoice::Cuda(index);
        bail!("⟨device⟩ {choice}: {NO_FEATURE}")
    }

    pub fn devices() -> Result<Vec<CudaGpu>> {
        bail!("{NO_FEATURE}")
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use anyhow::Context;
    use burn::tensor::Device;
    use cudarc::driver::{result as cu, sys};
    use std::sync::OnceLock;

    /// Looked at once per process: the answer does not change while it runs.
    fn probe() -> &'static CudaProbe {
        static PROBE: OnceLock<CudaProbe> = OnceLock::new();
        PROBE.get_or_init(|| {
            // SAFETY: each only tries to dlopen the library's candidate names.
            let driver = unsafe { cudarc::driver::sys::is_culib_present() };
            let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
            let toolkit = cubecl_cuda::install::cuda_path();
            let headers = toolkit
                .as_ref()
                .is_some_and(|t| HEADERS.iter().all(|h| t.join("include").join(h).is_file()));
            let devices = if driver {
                list().map_err(|e| e.to_string())
            } else {
                Ok(vec![])
            };
            CudaProbe {
                driver,
                nvrtc,
                toolkit,
                headers,
                devices,
            }
        })
    }

    /// The driver's device list (`cuInit`, then each device's name, memory and capability).
    fn list() -> std::result::Result<Vec<CudaGpu>, cu::DriverError> {
        cu::init()?;
        let n = cu::device::get_count()?;
        (0..n)
            .map(|i| {
                let dev = cu::device::get(i)?;
                let attr = |a| unsafe { cu::device::get_attribute(dev, a) };
                Ok(CudaGpu {
                    index: i as usize,
                    name: cu::device::get_name(dev)?,
                    // SAFETY: `dev` came from cuDeviceGet.
                    memory_bytes: unsafe { cu::device::total_mem(dev)? } as u64,
                    compute_capability: (
                        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                    ),
                })
            })
            .collect()
    }

    pub fn devices() -> Result<Vec<CudaGpu>> {
        probe().gpus()
    }

    pub fn open(index: Option<usize>) -> Result<Selected> {
        let gpu = probe()
            .pick(index)
            .with_context(|| format!("⟨device⟩ {}", super::super::choice::DeviceChoice::Cuda(index)))?;
        let device = Device::cuda(gpu.index);
        // The runtime starts (and compiles its first kernel) at the first tensor: do it here,
        // so that a failure is reported as this device's, before any file is written.
        let first = std::panic::catch_unwind(|| {
            burn::tensor::Tensor::<1>::from_floats([1.0f32, 2.0], &device)
                .sum()
                .into_scalar::<f32>()
        });
        match first {
            Ok(3.0) => {}
            Ok(v) => bail!("{gpu}: a first kernel computed 1 + 2 = {v}"),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                bail!("{gpu}: the CUDA runtime failed to start: {msg}")
            }
        }
        Ok(Selected {
            device,
            description: gpu.to_string(),
            is_gpu: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: usize) -> CudaGpu {
        CudaGpu {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: 85_045_477_376,
            compute_capability: (9, 0),
        }
    }

    fn complete() -> CudaProbe {
        CudaProbe {
            driver: true,
            nvrtc: true,
            toolkit: Some("/usr/local/cuda".into()),
            headers: true,
            devices: Ok(vec![gpu(0), gpu(1)]),
        }
    }

    /// Each missing piece is named with its fix, in the order the runtime would trip on them.
    #[test]
    fn each_missing_piece_says_which_and_how_to_fix_it() {
        assert_eq!(complete().missing(), None);
        let case = |f: fn(&mut CudaProbe)| {
            let mut p = complete();
            f(&mut p);
            p.missing().unwrap()
        };
        let m = case(|p| p.driver = false);
        assert!(m.starts_with("no NVIDIA driver: libcuda.so.1 was not found"), "{m}");
        let m = case(|p| p.nvrtc = false);
        assert!(m.starts_with("no NVRTC:") && m.contains("LD_LIBRARY_PATH"), "{m}");
        let m = case(|p| p.toolkit = None);
        assert!(m.starts_with("no CUDA headers:") && m.contains("set CUDA_PATH"), "{m}");
        let m = case(|p| p.headers = false);
        assert!(
            m.starts_with("no CUDA headers: /usr/local/cuda has no include/cuda_fp16.h"),
            "{m}"
        );
        let m = case(|p| p.devices = Err("CUDA_ERROR_NO_DEVICE".into()));
        assert_eq!(m, "the NVIDIA driver did not start: CUDA_ERROR_NO_DEVICE");
        let m = case(|p| p.devices = Ok(vec![]));
        assert!(m.starts_with("no CUDA device"), "{m}");
        // The driver is looked at before NVRTC: a machine with neither hears of the driver.
        let m = case(|p| {
            p.driver = false;
            p.nvrtc = false
        });
        assert!(m.starts_with("no NVIDIA driver"), "{m}");
    }

    #[test]
    fn an_index_past_the_last_device_lists_the_devices() {
        let p = complete();
        assert_eq!(p.pick(None).unwrap().index, 0);
        assert_eq!(p.pick(Some(1)).unwrap().index, 1);
        let e = p.pick(Some(2)).unwrap_err().to_string();
        assert_eq!(
            e,
            "⟨device⟩ cuda:2: this machine has 2 CUDA device(s): cuda:0 (NVIDIA H100 80GB HBM3, 79.2 GiB, \
             compute capability 9.0); cuda:1 (NVIDIA H100 80GB HBM3, 79.2 GiB, compute capability 9.0)"
        );
        let mut none = complete();
        none.nvrtc = false;
        assert!(none.pick(Some(0)).unwrap_err().to_string().starts_with("no NVRTC"));
    }

    /// This machine's own answer, whatever it has: a device list or one line naming what is
    /// missing, never a panic.
    #[test]
    fn devices_never_panic() {
        match devices() {
            Ok(list) => assert!(list.iter().enumerate().all(|(i, g)| g.index == i)),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
