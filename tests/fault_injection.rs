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

/// The changes a command makes, as `RDML_FAULT_LOG` lists them: `(number, what, path)`.
fn counted(run: impl Fn(&[(&str, &str)]) -> Output, log: &Path) -> Vec<(usize, String)> {
    let o = run(&[("RDML_FAULT_LOG", log.to_str().unwrap())]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut p = l.splitn(2, ' ');
            (p.next().unwrap().parse().unwrap(), p.next().unwrap().to_string())
        })
        .collect()
}

/// Every file under `dir` but run markers and ledgers (they hold tokens or digests, not results)
/// and burn's checkpoint records (they hold each process's parameter ids: never the same bytes).
fn results(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    snapshot(dir)
        .into_iter()
        .filter(|(k, _)| !k.contains(".rdml") && !k.ends_with(".bpk"))
        .collect()
}

/// Kills `run` (into a fresh copy of `base`) before each change in `points` in turn; `next` is
/// the next command, which settles the folder. After it the folder's results are `old` or
/// `new`, never a mix, and no staging folder is left. Returns (kept old, stood new).
fn kill_each(
    d: &Path,
    base: &Path,
    points: &[usize],
    run: impl Fn(&Path, &[(&str, &str)]) -> Output,
    next: impl Fn(&Path),
    new: &BTreeMap<String, Vec<u8>>,
) -> (usize, usize) {
    let old = results(base);
    let (mut kept, mut stood) = (0, 0);
    for &k in points {
        let t = d.join(format!("killed-{k}"));
        copy(base, &t);
        let at = k.to_string();
        let o = run(&t, &[("RDML_FAULT_AT", &at)]);
        assert_eq!(o.status.code(), Some(137), "change {k}: {}", text(&o));
        next(&t);
        let now = results(&t);
        assert!(
            std::fs::read_dir(&t)
                .unwrap()
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with(".rdml-staging")),
            "change {k}: a staging folder is left"
        );
        assert_eq!(
            now.get("notes.txt"),
            old.get("notes.txt"),
            "change {k}: the user's file"
        );
        if now == old {
            kept += 1;
        } else {
            let differ: Vec<&String> = now
                .keys()
                .chain(new.keys())
                .filter(|f| now.get(*f) != new.get(*f))
                .collect();
            assert!(
                differ.is_empty(),
                "change {k}: neither the old state nor the new: {differ:?} differ from the new"
            );
            stood += 1;
        }
        let _ = std::fs::remove_dir_all(&t);
    }
    (kept, stood)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-fault-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A finished quickstart run to read from, outside the folders under test.
fn model(d: &Path) -> PathBuf {
    let m = d.join("model");
    assert!(train(&m, &[], &[]).status.success());
    m
}

/// `attack --attack ES` on `m`'s first `queries` items, its examples saved into `t`.
fn save_examples(m: &Path, t: &Path, queries: &str, env: &[(&str, &str)]) -> Output {
    let a = [
        "attack",
        "--model",
        m.to_str().unwrap(),
        "--attack",
        "ES",
        "--steps",
        "2",
        "--queries",
        queries,
        "--batch",
        "8",
        "--quiet",
        "--save-examples",
        t.to_str().unwrap(),
    ];
    rdml(&a, env)
}

#[test]
fn save_examples_over_earlier_ones_killed_before_each_change_loses_nothing() {
    let d = scratch("examples");
    let m = model(&d);
    let attack = |t: &Path, queries: &str, env: &[(&str, &str)]| save_examples(&m, t, queries, env);
    let base = d.join("base");
    assert!(attack(&base, "12", &[]).status.success());
    std::fs::write(base.join("notes.txt"), b"the user's own file").unwrap();
    let whole = d.join("whole");
    copy(&base, &whole);
    let changes = counted(|env| attack(&whole, "8", env), &d.join("examples.log"));
    let new = results(&whole);
    assert_eq!(new.keys().filter(|k| k.ends_with(".png")).count(), 8);
    let points: Vec<usize> = changes.iter().map(|c| c.0).collect();
    assert!(points.len() >= 20, "{} changes", points.len());
    // The next command: another set into the folder settles it first (here refused before work).
    let next = |t: &Path| {
        let o = rdml(
            &[
                "attack",
                "--model",
                "/nonexistent",
                "--attack",
                "ES",
                "--save-examples",
                t.to_str().unwrap(),
            ],
            &[],
        );
        assert!(!text(&o).contains("panicked"), "{}", text(&o));
    };
    let (kept, stood) = kill_each(&d, &base, &points, |t, env| attack(t, "8", env), next, &new);
    assert!(
        kept > 5 && stood > 5,
        "{kept} kills kept the old set, {stood} the new one"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_npy_set_over_an_old_one_killed_before_each_change_loses_nothing() {
    let d = scratch("embed");
    let m = model(&d);
    let embed = |t: &Path, split: &str, env: &[(&str, &str)]| {
        let out = t.join("e.npy");
        let a = [
            "embed",
            "--model",
            m.to_str().unwrap(),
            "--split",
            split,
            "--out",
            out.to_str().unwrap(),
            "--overwrite",
            "--quiet",
        ];
        rdml(&a, env)
    };
    let base = d.join("base");
    std::fs::create_dir_all(&base).unwrap();
    assert!(embed(&base, "test", &[]).status.success());
    std::fs::write(base.join("notes.txt"), b"the user's own file").unwrap();
    let whole = d.join("whole");
    copy(&base, &whole);
    let changes = counted(|env| embed(&whole, "train", env), &d.join("embed.log"));
    let new = results(&whole);
    rdml::embed::verify_set(&whole.join("e.npy")).unwrap();
    let points: Vec<usize> = changes.iter().map(|c| c.0).collect();
    assert!(points.len() >= 12, "{} changes", points.len());
    // The next command that writes the set settles it first.
    let next = |t: &Path| {
        rdml::embed::check_out(&t.join("e.npy"), true).unwrap();
        rdml::embed::verify_set(&t.join("e.npy")).unwrap();
    };
    let (kept, stood) = kill_each(&d, &base, &points, |t, env| embed(t, "train", env), next, &new);
    assert!(
        kept > 3 && stood > 3,
        "{kept} kills kept the old set, {stood} the new one"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn import_overwrite_killed_before_each_change_loses_nothing() {
    use std::io::Read;
    let d = scratch("import");
    let gz = std::fs::File::open(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/import/renamed-c2f2.pth.gz"
    ))
    .unwrap();
    let mut bytes = vec![];
    flate2::read::GzDecoder::new(gz).read_to_end(&mut bytes).unwrap();
    let from = d.join("c2f2.pth");
    std::fs::write(&from, bytes).unwrap();
    let import = |t: &Path, env: &[(&str, &str)]| {
        let a = [
            "import",
            "--from",
            from.to_str().unwrap(),
            "--arch",
            "c2f2",
            "--key-map",
            "encoder.=",
            "--key-map",
            "head.=fc2.",
            "--out",
            t.to_str().unwrap(),
            "--overwrite",
        ];
        rdml(&a, env)
    };
    // The old state: a trained run, with a file of the user's in it.
    let base = d.join("base");
    assert!(train(&base, &[], &[]).status.success());
    std::fs::write(base.join("notes.txt"), b"the user's own file").unwrap();
    let whole = d.join("whole");
    copy(&base, &whole);
    let changes = counted(|env| import(&whole, env), &d.join("import.log"));
    let new = results(&whole);
    assert!(new.contains_key("import.json") && new.contains_key("notes.txt"));
    assert!(!new.contains_key("log.jsonl"), "the trained run's files went");
    let points: Vec<usize> = changes.iter().map(|c| c.0).collect();
    assert!(points.len() >= 20, "{} changes", points.len());
    let next = |t: &Path| {
        let o = rdml(&["eval", "--model", t.to_str().unwrap(), "--quiet"], &[]);
        assert!(o.status.success(), "{}", text(&o));
    };
    let (kept, stood) = kill_each(&d, &base, &points, import, next, &new);
    assert!(
        kept > 5 && stood > 0,
        "{kept} kills kept the old run, {stood} the new one"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `compare.json`'s run names, and whether `compare.md` names the same runs (one write of both).
fn tables(t: &Path) -> (Vec<String>, bool) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(t.join("compare.json")).unwrap()).unwrap();
    let names: Vec<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    let md = std::fs::read_to_string(t.join("compare.md")).unwrap();
    let all = ["quickstart-seed0", "quickstart-seed1", "quickstart-seed2"];
    let agree = all
        .iter()
        .all(|n| md.contains(&format!("| {n} ")) == names.iter().any(|m| m == n));
    (names, agree)
}

#[test]
fn compare_adding_a_seed_killed_before_each_table_change_loses_nothing() {
    let d = scratch("compare");
    let compare = |t: &Path, seeds: &str, env: &[(&str, &str)]| {
        let mut a = vec![
            "compare",
            "--configs",
            "quickstart",
            "--out",
            t.to_str().unwrap(),
            "--seeds",
            seeds,
        ];
        a.extend(&QUICK[2..]);
        a.extend(["--queries", "8", "--steps", "2", "--batch", "8"]);
        rdml(&a, env)
    };
    let base = d.join("base");
    let o = compare(&base, "2", &[]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(base.join("notes.txt"), b"the user's own file").unwrap();
    let whole = d.join("whole");
    copy(&base, &whole);
    let o = compare(&whole, "3", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(tables(&whole).0.len(), 3);
    // The added seed's run, trained: the kills below interrupt the comparison's own writes.
    copy(&whole.join("quickstart-seed2"), &base.join("quickstart-seed2"));
    let again = d.join("again");
    copy(&base, &again);
    let changes = counted(|env| compare(&again, "3", env), &d.join("compare.log"));
    let own = |p: &str| {
        let p = Path::new(p);
        p.parent() == Some(&again)
            || p.parent().and_then(Path::parent) == Some(&again)
                && p.parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n.to_string_lossy().starts_with(".rdml-staging"))
    };
    let path = |c: &(usize, String)| c.1.split_once(' ').unwrap().1.to_string();
    // The last write of the tables and the report's (the earlier ones are the same code on fewer
    // rows): each begins with the ledger's three changes (its file linked, then renamed), then
    // its staging folder.
    let stagings: Vec<usize> = changes
        .iter()
        .filter(|c| c.1.starts_with("mkdir") && own(&path(c)))
        .map(|c| c.0)
        .collect();
    let from = stagings[stagings.len() - 2] - 3;
    let points: Vec<usize> = changes
        .iter()
        .filter(|c| c.0 >= from && own(&path(c)))
        .map(|c| c.0)
        .collect();
    assert!(points.len() >= 15, "{} changes of the tables", points.len());
    let (mut before, mut after) = (0, 0);
    for &k in &points {
        let t = d.join(format!("killed-{k}"));
        copy(&base, &t);
        let at = k.to_string();
        assert_eq!(
            compare(&t, "3", &[("RDML_FAULT_AT", &at)]).status.code(),
            Some(137),
            "change {k}"
        );
        rdml::owned::Ledger::open(&t, rdml::compare::LEDGER, "--out").unwrap();
        assert_eq!(std::fs::read(t.join("notes.txt")).unwrap(), b"the user's own file");
        // The pair of the write before (two runs) or of this one (three), never one of each.
        let (names, agree) = tables(&t);
        assert!(
            agree,
            "change {k}: compare.md and compare.json from different writes: {names:?}"
        );
        match names.len() {
            2 => before += 1,
            3 => after += 1,
            n => panic!("change {k}: {n} rows"),
        }
        let _ = std::fs::remove_dir_all(&t);
    }
    assert!(
        before > 3 && after > 5,
        "{before} kills kept the tables before, {after} the new ones"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `compare` refuses, before it trains anything: a folder holding a `compare.json` rdml did not
/// write, a run folder, and seeds past the largest a config holds (issue 38).
#[test]
fn compare_refuses_before_training() {
    let d = scratch("compare-refusals");
    let compare = |out: &Path, extra: &[&str]| {
        let mut a = vec!["compare", "--configs", "quickstart", "--out", out.to_str().unwrap()];
        a.extend(&QUICK[2..]);
        a.extend(extra);
        rdml(&a, &[])
    };
    let theirs = d.join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("compare.json"), b"{\"another\": \"tool\"}").unwrap();
    let o = compare(&theirs, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("compare.json exists and rdml did not write it"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_dir(&theirs).unwrap().count(),
        1,
        "nothing written beside it"
    );
    let run = d.join("run");
    assert!(train(&run, &[], &[]).status.success());
    let before = snapshot(&run);
    let o = compare(&run, &[]);
    assert!(text(&o).contains("is an rdml run folder"), "{}", text(&o));
    assert!(snapshot(&run) == before);
    let fresh = d.join("fresh");
    let o = compare(&fresh, &["--seeds", "2", "--set", "seed=9223372036854775807"]);
    assert!(
        text(&o).contains("its last seed would pass 9223372036854775807"),
        "{}",
        text(&o)
    );
    assert!(
        !fresh.join("quickstart-seed9223372036854775807").exists(),
        "nothing trained"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A path that is not UTF-8 works (a run, its records, a compare folder) or is refused before any
/// work (a `.npy` set, whose members are named after it as text), never written under a name
/// the user did not give (issue 38).
#[test]
fn non_utf8_paths_work_or_are_refused_before_work() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let d = scratch("non-utf8");
    let run = d.join(OsStr::from_bytes(b"r\xff"));
    let o = Command::new(env!("CARGO_BIN_EXE_rdml"))
        .arg("train")
        .arg("--out")
        .arg(&run)
        .args(QUICK)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let run_s = run.as_os_str();
    let o = Command::new(env!("CARGO_BIN_EXE_rdml"))
        .args(["robustness", "--queries", "4", "--steps", "1", "--quiet", "--model"])
        .arg(run_s)
        .output()
        .unwrap();
    assert!(o.status.success() && !text(&o).contains("warning"), "{}", text(&o));
    assert!(run.join("robustness.json").is_file());
    let embed = |name: &[u8]| {
        Command::new(env!("CARGO_BIN_EXE_rdml"))
            .args(["embed", "--quiet", "--model"])
            .arg(run_s)
            .arg("--out")
            .arg(d.join(OsStr::from_bytes(name)))
            .output()
            .unwrap()
    };
    let o = embed(b"e\xfe.npy");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("a .npy set's file name must be UTF-8 text"),
        "{}",
        text(&o)
    );
    let names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "nothing written beside the run: {names:?}");
    assert!(embed(b"e\xfe.npz").status.success());
    assert!(d.join(OsStr::from_bytes(b"e\xfe.npz")).is_file());
    let _ = std::fs::remove_dir_all(&d);
}

/// The undo of an interrupted replacement, killed in turn before each of its own changes: the
/// command after it still gives the old run back byte for byte (a second kill never removes a
/// file already put back).
#[test]
fn an_undo_killed_before_each_change_still_gives_the_old_run_back() {
    let d = scratch("undo");
    let base = d.join("base");
    assert!(train(&base, &[], &[]).status.success());
    std::fs::write(base.join("notes.txt"), b"the user's own file").unwrap();
    let old = snapshot(&base);
    let whole = d.join("whole");
    copy(&base, &whole);
    let changes = counted(
        |env| train(&whole, &["--overwrite", "--set", "seed=3"], env),
        &d.join("train.log"),
    );
    // Killed just before the new run's first checkpoint is swapped in: every old file stashed,
    // new files beside them.
    let swap = format!("rename {}", whole.join("checkpoint").display());
    let k = changes.iter().find(|c| c.1 == swap).unwrap().0;
    let killed = d.join("killed");
    copy(&base, &killed);
    let at = k.to_string();
    let o = train(&killed, &["--overwrite", "--set", "seed=3"], &[("RDML_FAULT_AT", &at)]);
    assert_eq!(o.status.code(), Some(137), "{}", text(&o));
    let eval = |t: &Path, env: &[(&str, &str)]| rdml(&["eval", "--model", t.to_str().unwrap(), "--quiet"], env);
    let probe = d.join("probe");
    copy(&killed, &probe);
    let undo = counted(|env| eval(&probe, env), &d.join("undo.log"));
    assert!(snapshot(&probe) == old);
    assert!(undo.len() >= 5, "{} changes in the undo", undo.len());
    for (j, _) in &undo {
        let t = d.join(format!("undo-{j}"));
        copy(&killed, &t);
        let at = j.to_string();
        assert_eq!(
            eval(&t, &[("RDML_FAULT_AT", &at)]).status.code(),
            Some(137),
            "undo change {j}"
        );
        let again = eval(&t, &[]);
        assert!(again.status.success(), "undo change {j}: {}", text(&again));
        assert!(snapshot(&t) == old, "undo change {j}: the old run is not whole");
        let _ = std::fs::remove_dir_all(&t);
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// An `--out` file killed while it is written leaves no temporary file behind (it has no name
/// until it is whole), and the earlier file stays as it was (issue 38).
#[test]
fn an_out_file_killed_while_written_leaves_no_temporary_file() {
    let d = scratch("out");
    let m = model(&d);
    let t = d.join("t");
    std::fs::create_dir_all(&t).unwrap();
    let out = t.join("m.json");
    let eval = |env: &[(&str, &str)]| {
        let a = [
            "eval",
            "--model",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--overwrite",
            "--quiet",
        ];
        rdml(&a, env)
    };
    assert!(eval(&[]).status.success());
    let changes = counted(eval, &d.join("eval.log"));
    let old = std::fs::read(&out).unwrap();
    let (at, _) = changes
        .iter()
        .find(|c| c.1.starts_with("link ") && c.1.contains(".m.json."))
        .expect("the write is linked once whole");
    let o = eval(&[("RDML_FAULT_AT", &at.to_string())]);
    assert_eq!(o.status.code(), Some(137), "{}", text(&o));
    let left: Vec<String> = std::fs::read_dir(&t)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["m.json"], "killed while writing: nothing but the earlier file");
    assert_eq!(std::fs::read(&out).unwrap(), old);
    let _ = std::fs::remove_dir_all(&d);
}

/// Every file under `dir`, at any depth, named as a write's temporary file (`.NAME.PID.tmp`).
fn temporaries(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            out.extend(temporaries(&p));
        } else if name.starts_with('.') && name.ends_with(".tmp") {
            out.push(p.display().to_string());
        }
    }
    out
}

/// The family "leftovers" (issue 52): a set of examples written into a folder with a ledger,
/// killed between each file's link and its rename (the file whole under its temporary name),
/// leaves that temporary file; the next command that writes there removes every one rdml can
/// prove its own, and the folder holds the old set or the new one.
#[test]
fn a_kill_between_link_and_rename_leaves_nothing_the_next_write_keeps() {
    let d = scratch("linked");
    let m = model(&d);
    let attack = |t: &Path, env: &[(&str, &str)]| save_examples(&m, t, "4", env);
    let base = d.join("base");
    assert!(attack(&base, &[]).status.success());
    let whole = d.join("whole");
    copy(&base, &whole);
    let changes = counted(|env| attack(&whole, env), &d.join("linked.log"));
    // A rename right after the link of the same file: the kill falls between the two.
    let between: Vec<usize> = changes
        .windows(2)
        .filter(|w| w[0].1.starts_with("link ") && w[1].1.starts_with("rename "))
        .map(|w| w[1].0)
        .collect();
    assert!(between.len() >= 3, "{changes:?}");
    for k in between {
        let t = d.join(format!("killed-{k}"));
        copy(&base, &t);
        let o = attack(&t, &[("RDML_FAULT_AT", &k.to_string())]);
        assert_eq!(o.status.code(), Some(137), "change {k}: {}", text(&o));
        assert!(!temporaries(&t).is_empty(), "change {k}: the kill left the linked file");
        let o = attack(&t, &[]);
        assert!(o.status.success(), "change {k}: {}", text(&o));
        assert_eq!(temporaries(&t), Vec::<String>::new(), "change {k}");
        let _ = std::fs::remove_dir_all(&t);
    }
    let _ = std::fs::remove_dir_all(&d);
}
