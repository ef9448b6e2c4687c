//! A real training run killed (SIGKILL) at seeded random moments, many times over, each attempt
//! continued with `--resume` (or started again when no epoch had finished), must end with the
//! weights of the uninterrupted run, bit for bit, and a log that marks every resume.

#![cfg(unix)]

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const ARGS: &[&str] = &[
    "--config",
    "quickstart",
    "--epochs",
    "4",
    "--max-batches",
    "4",
    "--quiet",
    "--set",
    "eval.nmi=false",
    "--set",
    "eval.every=2",
    "--set",
    "train.sampler.pairs=32",
];

fn command(out: &Path, resume: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdml"));
    c.arg("train").arg("--out").arg(out).args(ARGS);
    if resume {
        c.arg("--resume");
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

/// The tensors of a safetensors file by name (the header's key order is not stable).
fn tensors(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let data = &b[8 + n..];
    header
        .into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .map(|(k, v)| {
            let o = v["data_offsets"].as_array().unwrap();
            let (lo, hi) = (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize);
            (k, data[lo..hi].to_vec())
        })
        .collect()
}

fn finished(out: &Path) -> bool {
    std::fs::read_to_string(out.join("run.json")).is_ok_and(|s| s.contains("\"completed\": true"))
}

#[test]
fn killed_at_random_moments_resume_ends_with_the_uninterrupted_weights() {
    let tmp = std::env::temp_dir().join(format!("rdml-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let reference = tmp.join("reference");
    let t0 = Instant::now();
    let o = command(&reference, false).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let span = t0.elapsed();
    let want = tensors(&reference.join("model.safetensors"));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
    let (mut kills, mut resumes) = (0, 0);
    for trial in 0..6 {
        let out: PathBuf = tmp.join(format!("trial-{trial}"));
        let mut attempts = 0;
        while !finished(&out) {
            attempts += 1;
            assert!(attempts <= 12, "trial {trial}: no end after 12 attempts");
            let resume = out.join(".rdml-run").exists()
                && ["checkpoint", "checkpoint.tmp", "checkpoint.old"]
                    .iter()
                    .any(|c| out.join(c).join("state.json").exists());
            let mut child = command(&out, resume).spawn().unwrap();
            // Up to 3 kills per trial, anywhere within the span of a whole run; then let it end.
            if attempts <= 3 {
                std::thread::sleep(span.mul_f64(rng.random_range(0.05..0.9)));
                if child.try_wait().unwrap().is_none() {
                    child.kill().unwrap();
                    kills += 1;
                }
            }
            let o = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert!(!err.contains("panicked"), "trial {trial}: {err}");
            if o.status.code().is_some() {
                assert!(
                    o.status.success(),
                    "trial {trial} attempt {attempts} (resume {resume}): {err}"
                );
            }
            resumes += resume as usize;
        }
        assert_eq!(
            tensors(&out.join("model.safetensors")),
            want,
            "trial {trial}: weights differ"
        );
        let log = std::fs::read_to_string(out.join("log.jsonl")).unwrap();
        let starts = log.lines().filter(|l| l.contains("\"event\":\"start\"")).count();
        // One start record per attempt that got as far as opening the log (a kill while the
        // data loads comes before it); every resume says from which epoch.
        assert!(
            (1..=attempts).contains(&starts),
            "trial {trial}: {starts} starts, {attempts} attempts"
        );
        assert!(
            log.lines().all(|l| l.contains("\"attempt\":")),
            "trial {trial}: a record without its attempt"
        );
        for c in ["checkpoint.tmp", "checkpoint.old"] {
            assert!(!out.join(c).exists(), "trial {trial}: {c} left behind");
        }
    }
    assert!(kills >= 10 && resumes >= 5, "kills {kills}, resumes {resumes}");
    let _ = std::fs::remove_dir_all(&tmp);
}
