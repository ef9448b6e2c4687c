//! The compute device, chosen at run time: `cpu` (burn's Flex backend with rdml's own kernels),
//! `cuda` / `cuda:N` (burn's CUDA runtime, in a build with the `cuda` feature), `vulkan` /
//! `vulkan:N` (burn's wgpu backend on Vulkan, with the `vulkan` feature) or `auto` (CUDA, else a
//! Vulkan GPU, else the CPU). [`open`] is the policy every command uses: `--device`, else the
//! configs' `train.device`, else the CPU.
//!
//! Nothing downstream depends on the device: models are initialised and random starts drawn on
//! the CPU and then moved, so a seed gives the same run on every device, and checkpoints hold
//! host values.

mod choice;
mod cuda;
mod vulkan;

pub use choice::{Adapter, DeviceChoice, Selected};
pub use cuda::{CudaGpu, CudaProbe};

use anyhow::{Context, Result, bail};

/// Whether this build has the Vulkan backend (the `vulkan` feature).
pub const VULKAN_BUILT: bool = cfg!(feature = "vulkan");
/// Whether this build has the CUDA backend (the `cuda` feature).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

fn cpu() -> Selected {
    Selected {
        device: crate::default_device(),
        description: format!("cpu (Flex, {} threads)", rayon::current_num_threads()),
        is_gpu: false,
    }
}

/// Opens the device a user asked for. `auto` never fails: without a GPU it takes the CPU and
/// says why in the description.
pub fn select(choice: DeviceChoice) -> Result<Selected> {
    match choice {
        DeviceChoice::Cpu => Ok(cpu()),
        DeviceChoice::Cuda(index) => cuda::open(index),
        DeviceChoice::Vulkan(index) => vulkan::open(index),
        DeviceChoice::Auto => Ok(auto()),
    }
}

/// CUDA's first device, else the first Vulkan GPU, else the CPU, with the reasons for each
/// device it passed over.
fn auto() -> Selected {
    let mut why = vec![];
    if CUDA_BUILT {
        match cuda::devices().and_then(|_| cuda::open(None)) {
            Ok(s) => return s,
            Err(e) => why.push(format!("no CUDA device ({e:#})")),
        }
    } else {
        why.push("this build has no CUDA (⟨+cuda⟩ adds it)".to_string());
    }
    if VULKAN_BUILT {
        let gpu = vulkan::adapters().ok().and_then(|a| a.into_iter().find(|a| a.is_gpu));
        match gpu.map(|a| vulkan::open(Some(a.index))) {
            Some(Ok(s)) => return s,
            Some(Err(e)) => why.push(format!("the Vulkan GPU did not open ({e:#})")),
            None => why.push("no Vulkan GPU found".to_string()),
        }
    } else {
        why.push("this build has no Vulkan (⟨+vulkan⟩ adds it)".to_string());
    }
    let mut s = cpu();
    s.description += &format!("; auto: {}", why.join("; "));
    s
}

/// The device a command computes on: `flag` (`--device`) if given, else the `train.device` the
/// configs name (they must agree), else the CPU.
pub fn open(flag: Option<&str>, named: &[Option<DeviceChoice>]) -> Result<Selected> {
    let choice: DeviceChoice = match flag {
        Some(f) => f.parse().context("⟨device⟩")?,
        None => {
            let mut named = named.iter().flatten();
            let first = named.next().copied();
            if let Some(other) = named.find(|d| Some(**d) != first) {
                bail!(
                    "the configs name different devices ({} and {other}): choose one with ⟨device⟩",
                    first.unwrap_or_default()
                );
            }
            first.unwrap_or_default()
        }
    };
    select(choice)
}

/// The Vulkan adapters this machine offers (empty list or an error saying what is missing).
pub fn adapters() -> Result<Vec<Adapter>> {
    vulkan::adapters()
}

/// The CUDA devices this machine offers, or what is missing for them (driver, NVRTC, headers).
pub fn cuda_devices() -> Result<Vec<CudaGpu>> {
    cuda::devices()
}

/// The line of a failure message that says the device ran out of memory, or that a tensor is
/// larger than the largest buffer the device allows (cubecl's `BufferTooBig`: 128 MiB on Mesa's
/// lavapipe, where a rob224 attack batch of 64 outgrows it), with what it means.
fn out_of_memory_line(message: &str) -> Option<(&'static str, &str)> {
    message.lines().map(str::trim).find_map(|line| {
        let l = line.to_ascii_lowercase().replace(['-', '_'], " ");
        if l.contains("out of memory") || l.contains("outofmemory") || l.contains("out of device memory") {
            Some(("the device ran out of memory", line))
        } else if l.contains("can't allocate buffer of size") || l.contains("buffertoobig") {
            Some(("a tensor is larger than the largest buffer the device allows", line))
        } else {
            None
        }
    })
}

/// Turns a failure message into advice when it is the device running out of memory.
pub fn out_of_memory_advice(message: &str) -> Option<String> {
    out_of_memory_line(message).map(|(what, _)| advice(what))
}

/// The advice for a device out of memory, then the device's own line (the failure, not the
/// dozen lines of kernels it made skip): what the command line and the Python package say in
/// place of `message`; `None` when `message` is another failure.
pub fn out_of_memory_report(message: &str) -> Option<String> {
    out_of_memory_line(message).map(|(what, line)| format!("{}\n(from the device: {line})", advice(what)))
}

fn advice(what: &str) -> String {
    format!(
        "{what}: lower the batch size (train.sampler.pairs, or train.sampler.classes × \
         per_class, for training; eval.batch_size for evaluation; ⟨batch⟩ for attack, robustness \
         and compare) or use a device with more memory; a run stopped here resumes from its last \
         finished epoch with ⟨resume!⟩"
    )
}

/// What `rdml devices` lists, one line each: the CPU, each CUDA device and Vulkan adapter (or
/// why there is none), and what `auto` takes.
pub fn list() -> Result<Vec<String>> {
    let mut lines = vec![format!(
        "cpu (Flex, {} threads; rdml's own kernels)",
        rayon::current_num_threads()
    )];
    match cuda_devices() {
        Ok(list) => lines.extend(list.iter().map(|g| g.to_string())),
        Err(e) => lines.push(format!("no CUDA device: {e:#}")),
    }
    match adapters() {
        Ok(list) if list.is_empty() => lines.push("no Vulkan device (the loader found no driver)".into()),
        Ok(list) => lines.extend(list.iter().map(|a| a.to_string())),
        Err(e) => lines.push(format!("no Vulkan device: {e:#}")),
    }
    lines.push(format!("auto → {}", select(DeviceChoice::Auto)?.description));
    Ok(lines)
}

/// Sizes rdml's CPU thread pool (rayon's, which its kernels and burn's CPU backend share) to `n`
/// threads, before rdml's first CPU work: a front end that runs beside another pool (PyTorch's,
/// one per rank under torch.distributed) makes them agree. `false` when the pool already runs or
/// `RAYON_NUM_THREADS` sizes it: its size then stays.
pub fn cpu_threads(n: usize) -> bool {
    let sized = std::env::var("RAYON_NUM_THREADS").is_ok_and(|v| v.parse::<usize>().is_ok_and(|k| k > 0));
    if n == 0 || sized {
        return false;
    }
    // Only ever smaller than the default: the cores this process may use (a container's quota).
    let cores = std::thread::available_parallelism().map_or(n, |c| c.get());
    rayon::ThreadPoolBuilder::new()
        .num_threads(n.min(cores))
        .build_global()
        .is_ok()
}

/// rdml's CPU pool beside another pool of `n` threads (PyTorch's, told by the Python front
/// end): it follows `n` ([`cpu_threads`]) where the launch sized that pool — torchrun's ranks
/// (`LOCAL_WORLD_SIZE` > 1: one thread a rank by default) or `OMP_NUM_THREADS` — since pools the
/// size of the machine on every rank would oversubscribe it; else it keeps its own size.
pub fn cpu_threads_beside(n: usize) -> bool {
    let ranks = std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let launched = ranks.is_some_and(|r| r > 1) || std::env::var_os("OMP_NUM_THREADS").is_some();
    launched && cpu_threads(n)
}

/// The threads of rdml's CPU pool (started with its default size if it was not yet).
pub fn cpu_pool_size() -> usize {
    rayon::current_num_threads()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    #[test]
    fn parses_every_spelling_and_rejects_the_rest() {
        assert_eq!("cpu".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
        assert_eq!("Vulkan".parse::<DeviceChoice>().unwrap(), DeviceChoice::Vulkan(None));
        assert_eq!(
            "vulkan:2".parse::<DeviceChoice>().unwrap(),
            DeviceChoice::Vulkan(Some(2))
        );
        assert_eq!("CUDA".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cuda(None));
        assert_eq!("cuda:1".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cuda(Some(1)));
        assert_eq!("auto".parse::<DeviceChoice>().unwrap(), DeviceChoice::Auto);
        for bad in ["cuda:", "cuda:-1", "vulkan:", "vulkan:-1", "vulkan:x", "rocm", ""] {
            let e = bad.parse::<DeviceChoice>().unwrap_err().to_string();
            assert!(e.contains("expected cpu, cuda, cuda:N, vulkan, vulkan:N"), "{bad}: {e}");
        }
        for c in [
            DeviceChoice::Vulkan(Some(3)),
            DeviceChoice::Cuda(Some(2)),
            DeviceChoice::Cuda(None),
        ] {
            assert_eq!(c.to_string().parse::<DeviceChoice>().unwrap(), c);
        }
        let e = "rocm".parse::<DeviceChoice>().unwrap_err().to_string();
        assert!(e.contains("use vulkan"), "{e}");
    }

    #[test]
    fn the_flag_wins_then_the_configs_must_agree() {
        let cpu = Some(DeviceChoice::Cpu);
        assert_eq!(open(None, &[None, cpu]).unwrap().device, Device::flex());
        assert_eq!(
            open(Some("cpu"), &[Some(DeviceChoice::Cuda(None))]).unwrap().device,
            Device::flex()
        );
        let e = open(None, &[cpu, Some(DeviceChoice::Cuda(Some(1)))])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the configs name different devices (cpu and cuda:1): choose one with ⟨device⟩"
        );
        let e = format!("{:#}", open(Some("tpu"), &[]).unwrap_err());
        assert!(e.starts_with("⟨device⟩: device 'tpu': expected cpu, cuda"), "{e}");
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
        assert!(e.contains("⟨+vulkan⟩"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_names_the_feature() {
        for c in [DeviceChoice::Cuda(None), DeviceChoice::Cuda(Some(1))] {
            let e = select(c).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("⟨device⟩ {c}: this rdml was built without CUDA")),
                "{e}"
            );
            assert!(e.contains("⟨+cuda⟩"), "{e}");
        }
        assert!(cuda_devices().unwrap_err().to_string().contains("⟨+cuda⟩"));
        let auto = select(DeviceChoice::Auto).unwrap().description;
        assert!(auto.contains("this build has no CUDA (⟨+cuda⟩ adds it)"), "{auto}");
    }

    #[test]
    fn out_of_memory_is_told_apart() {
        let a = out_of_memory_advice("An out-of-memory error happened during launch: OutOfMemory { size: 1 }");
        assert!(a.unwrap().contains("lower the batch size"));
        assert!(out_of_memory_advice("shape mismatch").is_none());
        // The CUDA driver's spelling.
        assert!(out_of_memory_advice("DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")").is_some());
        assert!(out_of_memory_advice("CUDA_ERROR_OUT_OF_MEMORY").is_some());
        // What Mesa's lavapipe gave for a rob224 attack batch of 64 (64 × 64 × 112 × 112 floats).
        let big = out_of_memory_advice(
            "reading a tensor back from the device: An error happened during execution\nCaused by:\n  \
             Several failures at once\nCaused by:\n  An IO error happened\nCaused by:\n  can't \
             allocate buffer of size: 205520896",
        );
        assert!(
            big.unwrap()
                .starts_with("a tensor is larger than the largest buffer the device allows: lower the batch size")
        );
        let report = out_of_memory_report(
            "reading a tensor back from the device: An error happened during execution\nCaused by:\n  \
             skipped `KernelBinop`: it needed memory ManagedMemoryId { value: 646 }\nCaused by:\n  \
             can't allocate buffer of size: 205520896\nNo backtrace available",
        )
        .unwrap();
        assert!(
            report.ends_with("\n(from the device: can't allocate buffer of size: 205520896)"),
            "{report}"
        );
        assert!(out_of_memory_report("shape mismatch").is_none());
    }
}
