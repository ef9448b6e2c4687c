//! `--device cuda` as a user meets it on any machine: in a build without the `cuda` feature, an
//! error that names the feature; with it, on a machine without an NVIDIA GPU (CI's), one line
//! saying what is missing (driver, NVRTC, headers) and exit status 1, never a panic; an index past
//! the last device lists the devices. The numbers on a real GPU are `tests/vulkan.rs`'s kind of
//! test and `bench/gpu.sh`'s, run where a GPU is lent.

use std::process::{Command, Output};

fn rdml(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdml")).args(args).output().unwrap()
}

/// Exit status 1 and one `error:` line (no panic, no backtrace).
fn one_error_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    lines[0].to_string()
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_in_a_build_without_the_feature_names_the_feature() {
    let e = one_error_line(&rdml(&["eval", "--model", "/nonexistent", "--device", "cuda"]));
    assert_eq!(
        e,
        "error: --device cuda: this rdml was built without CUDA; build it with `cargo build --release \
         --features cuda` (needs the NVIDIA driver, NVRTC and the CUDA headers at run time)"
    );
    let out = rdml(&["devices"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("no CUDA device: this rdml was built without CUDA"),
        "{text}"
    );
    assert!(
        text.contains("auto → cpu")
            && text.contains("this build has no CUDA (`cargo build --release --features cuda` adds it)"),
        "{text}"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_says_what_is_missing_or_lists_the_devices() {
    let out = rdml(&["devices"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    let has_gpu = text.lines().any(|l| l.starts_with("cuda:0 ("));
    if !has_gpu {
        // One of the probe's lines, whichever piece this machine lacks first.
        let line = text
            .lines()
            .find(|l| l.starts_with("no CUDA device: "))
            .unwrap_or_else(|| panic!("{text}"));
        let known = [
            "no NVIDIA driver",
            "no NVRTC",
            "no CUDA headers",
            "the NVIDIA driver did not start",
            "no CUDA device",
        ];
        assert!(
            known.iter().any(|k| line["no CUDA device: ".len()..].starts_with(k)),
            "{line}"
        );
        let e = one_error_line(&rdml(&["eval", "--model", "/nonexistent", "--device", "cuda"]));
        assert!(e.starts_with("error: --device cuda: "), "{e}");
        assert!(e.ends_with(&line["no CUDA device: ".len()..]), "{e} vs {line}");
        assert!(
            text.contains("auto → cpu") && text.contains("auto: no CUDA device ("),
            "{text}"
        );
    }
    let e = one_error_line(&rdml(&["eval", "--model", "/nonexistent", "--device", "cuda:99"]));
    assert!(e.starts_with("error: --device cuda:99: "), "{e}");
    if has_gpu {
        assert!(e.contains("this machine has") && e.contains("cuda:0 ("), "{e}");
    }
}
