//! The run folder module's own tests: claims, locks, overwrite and the checkpoint swap.

use super::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-run-dir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn checkpoint(dir: &Path, name: &str, epochs: usize, complete: bool) {
    let c = dir.join(name);
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(c.join("model.bpk"), format!("weights of epoch {epochs}")).unwrap();
    if complete {
        std::fs::write(c.join("state.json"), format!("{{\"epochs_done\": {epochs}}}")).unwrap();
    }
}

fn marked(name: &str) -> PathBuf {
    let d = scratch(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(MARKER), "{}").unwrap();
    d
}

/// Every state the swap passes through, and the epoch resume must continue from.
#[test]
fn a_kill_at_any_step_of_the_swap_keeps_the_newest_complete_checkpoint() {
    type Setup = fn(&Path);
    let cases: [(&str, Setup, usize); 6] = [
        ("steady", |d| checkpoint(d, CKPT, 2, true), 2),
        // New checkpoint half written.
        (
            "tmp-partial",
            |d| {
                checkpoint(d, CKPT, 2, true);
                checkpoint(d, CKPT_TMP, 3, false);
            },
            2,
        ),
        // New checkpoint complete, old one not yet moved aside.
        (
            "tmp-complete",
            |d| {
                checkpoint(d, CKPT, 2, true);
                checkpoint(d, CKPT_TMP, 3, true);
            },
            3,
        ),
        // Old one moved aside, new one not yet renamed (the window that lost runs before).
        (
            "old-and-tmp",
            |d| {
                checkpoint(d, CKPT_OLD, 2, true);
                checkpoint(d, CKPT_TMP, 3, true);
            },
            3,
        ),
        // Renamed, the old one not yet removed.
        (
            "old-and-new",
            |d| {
                checkpoint(d, CKPT_OLD, 2, true);
                checkpoint(d, CKPT, 3, true);
            },
            3,
        ),
        // The swap of the previous code: old removed, tmp not yet renamed.
        ("tmp-only", |d| checkpoint(d, CKPT_TMP, 3, true), 3),
    ];
    for (name, setup, epochs) in cases {
        let d = marked(name);
        setup(&d);
        assert_eq!(inspect(&d).unwrap(), Found::Resumable { epochs_done: epochs }, "{name}");
        let run = RunDir::open(&d, Start::Resume).unwrap();
        assert_eq!(run.checkpoint(), Some(d.join(CKPT)), "{name}");
        assert_eq!(checkpoint_epochs(&d.join(CKPT)), Some(epochs), "{name}");
        assert!(!d.join(CKPT_TMP).exists() && !d.join(CKPT_OLD).exists(), "{name}");
        // A new run into it is refused; --overwrite removes it.
        drop(run);
        let err = RunDir::open(&d, Start::New).unwrap_err().to_string();
        assert!(err.contains("interrupted run") && err.contains("⟨resume!⟩"), "{err}");
        RunDir::open(&d, Start::Overwrite).unwrap();
        assert!(!d.join(CKPT).exists(), "{name}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn the_swap_replaces_the_checkpoint() {
    let d = scratch("swap");
    let run = RunDir::open(&d, Start::New).unwrap();
    for e in 1..=3 {
        run.save_checkpoint(|t| {
            std::fs::write(t.join("state.json"), format!("{{\"epochs_done\": {e}}}"))?;
            Ok(())
        })
        .unwrap();
        assert_eq!(checkpoint_epochs(&d.join(CKPT)), Some(e));
    }
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_foreign_folder_is_never_written() {
    let d = scratch("foreign");
    std::fs::create_dir_all(d.join("checkpoint")).unwrap();
    std::fs::write(d.join("checkpoint/notes.txt"), "mine").unwrap();
    for start in [Start::New, Start::Overwrite, Start::Resume] {
        let err = RunDir::open(&d, start).unwrap_err().to_string();
        assert!(err.contains("not an rdml run folder"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(d.join("checkpoint/notes.txt")).unwrap(), "mine");
    assert!(!d.join(MARKER).exists());
    // A file is not a folder.
    let f = d.join("file");
    std::fs::write(&f, "x").unwrap();
    assert!(
        RunDir::open(&f, Start::New)
            .unwrap_err()
            .to_string()
            .contains("not a folder")
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_finished_run_needs_resume_or_overwrite_and_overwrite_keeps_other_files() {
    let d = marked("finished");
    checkpoint(&d, CKPT, 3, true);
    std::fs::write(
        d.join("run.json"),
        r#"{"rdml_version": "0.1.0", "completed": true, "epochs": [{}, {}, {}]}"#,
    )
    .unwrap();
    std::fs::write(d.join("notes.txt"), "the user's").unwrap();
    assert_eq!(inspect(&d).unwrap(), Found::Finished { epochs: 3 });
    let err = RunDir::open(&d, Start::New).unwrap_err().to_string();
    assert!(err.contains("finished run (3 epochs)"), "{err}");
    assert!(d.join("run.json").exists());
    drop(RunDir::open(&d, Start::Resume).unwrap());
    RunDir::open(&d, Start::Overwrite).unwrap();
    assert!(!d.join("run.json").exists() && !d.join(CKPT).exists());
    assert_eq!(std::fs::read_to_string(d.join("notes.txt")).unwrap(), "the user's");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn one_writer_at_a_time() {
    let d = scratch("lock");
    let first = RunDir::open(&d, Start::New).unwrap();
    let err = RunDir::open(&d, Start::New).unwrap_err().to_string();
    assert!(err.contains("another rdml process"), "{err}");
    drop(first);
    RunDir::open(&d, Start::New).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(unix)]
#[test]
fn links_are_not_followed() {
    let d = marked("links");
    let victim = d.with_extension("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.join("log.jsonl")).unwrap();
    let err = format!("{:#}", open_nofollow(&d.join("log.jsonl"), true).unwrap_err());
    assert!(err.contains("symbolic link"), "{err}");
    // A link of a run's name is not a file rdml wrote: the run is refused, the link kept.
    let e = RunDir::open(&d, Start::New).unwrap_err().to_string();
    assert!(e.contains("log.jsonl: rdml did not write this file"), "{e}");
    assert!(is_link(&d.join("log.jsonl")));
    std::fs::remove_file(d.join("log.jsonl")).unwrap();
    std::os::unix::fs::symlink(&victim, d.join(".run.json.tmp")).unwrap();
    // Opening the run removes the planted temporary link (not its target).
    drop(RunDir::open(&d, Start::New).unwrap());
    assert!(!is_link(&d.join(".run.json.tmp")));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_file(&victim).unwrap();
}

#[test]
fn config_diff_names_the_keys() {
    let a = "seed = 0\n[train]\nepochs = 1\n[loss]\nmargin = 0.2\n";
    let b = "seed = 0\n[train]\nepochs = 2\n[loss]\nmargin = 0.2\nkind = \"x\"\n";
    assert_eq!(config_diff(a, b), vec!["loss.kind", "train.epochs"]);
    assert!(config_diff(a, a).is_empty());
}

/// A record is written only for the model it was computed on: once `model.safetensors`
/// changes (a retraining finished meanwhile), the check refuses and says why.
#[test]
fn a_record_for_replaced_weights_is_refused() {
    let d = scratch("digest");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("model.safetensors"), b"weights one").unwrap();
    let digest = model_digest(&d).unwrap();
    assert_eq!(digest, format!("crc32:{:08x}:11", crc32fast::hash(b"weights one")));
    check_unchanged(&d, &digest, "robustness.json").unwrap();
    std::fs::write(d.join("model.safetensors"), b"weights two").unwrap();
    let e = check_unchanged(&d, &digest, "robustness.json").unwrap_err().to_string();
    assert!(
        e.contains("the model changed while this ran") && e.contains("robustness.json not written"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Every scoring record is kept by one rule: the suite's and certification's records of a model
/// replaced meanwhile are refused in the same words, and neither is written.
#[test]
fn robustness_and_certify_records_of_replaced_weights_are_refused_alike() {
    let d = scratch("keep");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("model.safetensors"), b"weights one").unwrap();
    let digest = model_digest(&d).unwrap();
    std::fs::write(d.join("model.safetensors"), b"weights two").unwrap();
    let said: Vec<String> = ["robustness.json", "certify.json"]
        .iter()
        .map(|f| {
            let e = super::keep_record(&d, Some(&digest), f, &serde_json::json!({"table": 1}));
            assert!(!d.join(f).exists(), "{f} written");
            e.unwrap_err().to_string().replace(f, "RECORD")
        })
        .collect();
    assert_eq!(said[0], said[1]);
    assert!(said[0].contains("the model changed while this ran") && said[0].contains("RECORD not written"));
    let _ = std::fs::remove_dir_all(&d);
}

/// A `checkpoint/` that is a link is named as such, for a resume or a new run alike, and the
/// link and its target stay (issue 38).
#[test]
fn a_checkpoint_link_is_named_as_such() {
    let d = scratch("ckptlink");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(MARKER), b"{}").unwrap();
    let elsewhere = scratch("ckptlink-target");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join(STATE), b"{\"epochs_done\": 1}").unwrap();
    std::os::unix::fs::symlink(&elsewhere, d.join(CKPT)).unwrap();
    for start in [Start::New, Start::Resume, Start::Overwrite] {
        let e = RunDir::open(&d, start).unwrap_err().to_string();
        assert!(e.contains("checkpoint is a symbolic link"), "{start:?}: {e}");
    }
    assert!(is_link(&d.join(CKPT)) && elsewhere.join(STATE).exists());
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&elsewhere);
}

/// Reading a run that is not finished tells what it is and what to do, for every state an
/// interruption leaves (issue 38), not "no config.toml".
#[test]
fn reads_of_an_unfinished_run_tell_the_truth() {
    let d = marked("truth");
    let e = check_finished(&d).unwrap_err().to_string();
    assert!(e.ends_with("stopped before its first epoch ended: it has no checkpoint and no model yet; train it again into the same folder (it starts anew)"), "{e}");
    checkpoint(&d, CKPT, 2, true);
    let e = check_finished(&d).unwrap_err().to_string();
    assert!(
        e.contains("an interrupted run, not finished (2 epoch(s) done") && e.contains("⟨resume!⟩"),
        "{e}"
    );
    let empty = scratch("truth-empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(
        check_finished(&empty)
            .unwrap_err()
            .to_string()
            .ends_with("not an rdml run folder (it is empty)")
    );
    assert!(
        check_finished(&scratch("truth-none"))
            .unwrap_err()
            .to_string()
            .ends_with("no such folder")
    );
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&empty);
}
