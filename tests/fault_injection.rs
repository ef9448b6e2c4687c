//! Issue 38's fault injection: `train --overwrite` of a finished run is killed before each of its
//! filesystem changes in turn (rdml's fault point, `RDML_FAULT_AT`, counted by `RDML_FAULT_LOG`).
//! After every kill, and after the next command: the old run byte for byte or the new one (whole,
//! or resumable into the whole), never a mix; the user's file in the folder untouched; the
//! message of the command that settled the folder true.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const QUICK: &[&str] = &[
    "--config",
    "quickstart",
    "--epochs",
    "1",
    "--max-batches",
    "3",
    "--quiet",
    "--set",
    "eval.nmi=false",
    "--set",
    "train.sampler.pairs=32",
];

fn rdml(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdml"));
    c.args(args).env("RUST_BACKTRACE", "0");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn train(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut a = vec!["train", "--out", out.to_str().unwrap()];
    a.extend(QUICK);
    a.extend(extra);
    rdml(&a, env)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file under `dir` by its relative path, the run's marker aside (it holds a token).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                if rel != ".rdml-run" {
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn copy(from: &Path, to: &Path) {
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .unwrap()
            .success()
    );
}

#[test]
fn train_overwrite_killed_before_each_change_loses_nothing() {
    let d: PathBuf = std::env::temp_dir().join(format!("rdml-fault-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let base = d.join("base");
    assert!(train(&base, &[], &[]).status.success());
    std::fs::write(base.join("notes.txt"), b"the user's own file").unwrap();
    let old = snapshot(&base);
    // The whole replacement, its changes counted.
    let (whole, log) = (d.join("whole"), d.join("changes.log"));
    copy(&base, &whole);
    let o = train(
        &whole,
        &["--overwrite", "--set", "seed=3"],
        &[("RDML_FAULT_LOG", log.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", text(&o));
    let changes = std::fs::read_to_string(&log).unwrap().lines().count();
    assert!(changes >= 30, "{changes} changes counted");
    let new_model = std::fs::read(whole.join("model.safetensors")).unwrap();
    assert!(new_model != old["model.safetensors"]);
    let (mut kept_old, mut stood_new) = (0, 0);
    for k in 1..=changes {
        let t = d.join(format!("killed-{k}"));
        copy(&base, &t);
        let at = k.to_string();
        let o = train(&t, &["--overwrite", "--set", "seed=3"], &[("RDML_FAULT_AT", &at)]);
        assert_eq!(o.status.code(), Some(137), "change {k}: {}", text(&o));
        // A stash that holds some of a run's files (not only its journal): the settling says so.
        let stash = ["model.safetensors", "checkpoint"]
            .iter()
            .any(|f| t.join(".rdml-replaced").join(f).exists());
        // The next command that reads the folder settles it first, and says how.
        let eval = rdml(&["eval", "--model", t.to_str().unwrap(), "--quiet"], &[]);
        let said = text(&eval);
        assert!(!said.contains("panicked"), "change {k}: {said}");
        assert!(!t.join(".rdml-replaced").exists(), "change {k}: the stash is settled");
        let now = snapshot(&t);
        assert!(now["notes.txt"] == old["notes.txt"], "change {k}: the user's file");
        if now == old {
            kept_old += 1;
            assert!(eval.status.success(), "change {k}: {said}");
            if stash {
                assert!(
                    said.contains("the run it replaced is back as it was"),
                    "change {k}: {said}"
                );
            }
        } else {
            stood_new += 1;
            for f in ["model.safetensors", "config.toml", "run.json", "log.jsonl"] {
                assert!(
                    now.get(f) != old.get(f),
                    "change {k}: {f} of the old run beside the new one"
                );
            }
            if stash {
                assert!(said.contains("the new run stands"), "change {k}: {said}");
            }
        }
        // A plain train never replaces what is there, finished or interrupted.
        let again = train(&t, &["--set", "seed=4"], &[]);
        assert_eq!(again.status.code(), Some(1), "change {k}: {}", text(&again));
        assert!(text(&again).contains("holds a"), "change {k}: {}", text(&again));
        assert!(snapshot(&t) == now, "change {k}: the refused train changed the folder");
        if now != old && now.get("model.safetensors") != Some(&new_model) {
            let r = train(&t, &["--resume", "--set", "seed=3"], &[]);
            assert!(r.status.success(), "change {k}: {}", text(&r));
        }
        if now != old {
            let model = std::fs::read(t.join("model.safetensors")).unwrap();
            assert!(
                model == new_model,
                "change {k}: the resumed run's weights are the whole run's"
            );
        }
        let _ = std::fs::remove_dir_all(&t);
    }
    assert!(
        kept_old > 10 && stood_new > 10,
        "{kept_old} kills kept the old run, {stood_new} the new one"
    );
    let _ = std::fs::remove_dir_all(&d);
}
