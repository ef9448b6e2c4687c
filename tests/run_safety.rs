//! The cases of `hostile-input-cases.md` that once lost a run, overwrote one, followed a link,
//! printed numbers for a broken model or accepted a value out of range, each run through the
//! binary as a user would, on the embedded data.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-safety-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rdml(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdml"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Fails unless the command exited with `code` and said each of `needles`.
fn expect(o: &Output, code: i32, needles: &[&str]) {
    let t = text(o);
    assert_eq!(o.status.code(), Some(code), "{t}");
    for n in needles {
        assert!(t.contains(n), "expected {n:?} in:\n{t}");
    }
    assert!(!t.contains("panicked"), "{t}");
}

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

fn train_into(out: &Path, extra: &[&str]) -> Output {
    let mut a = vec!["train", "--out", out.to_str().unwrap()];
    a.extend(QUICK);
    a.extend(extra);
    rdml(&a)
}

/// A scratch folder holding a finished run in `run/`, trained with `QUICK`.
fn scratch_with_run(name: &str, says: &[&str]) -> (PathBuf, PathBuf) {
    let d = scratch(name);
    let run = d.join("run");
    expect(&train_into(&run, &[]), 0, says);
    (d, run)
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_default()
}

#[test]
fn a_finished_run_is_never_overwritten_and_a_failed_start_writes_nothing() {
    let (d, run) = scratch_with_run("finished", &["Recall@1"]);
    let files = ["run.json", "log.jsonl", "model.safetensors", "config.toml"];
    let before: Vec<Vec<u8>> = files.iter().map(|f| bytes(&run.join(f))).collect();
    // O03a: a new run into it, without --resume.
    expect(
        &train_into(&run, &["--set", "train.optimizer.lr=0.01"]),
        1,
        &["holds a finished run (1 epochs)", "--resume", "--overwrite"],
    );
    // O03b: a start that fails on the sampler (before, the log was already truncated).
    expect(
        &train_into(
            &run,
            &[
                "--set",
                "train.sampler={kind=\"class-balanced\",classes=20,per_class=4}",
            ],
        ),
        1,
        &["classes = 20"],
    );
    let after: Vec<Vec<u8>> = files.iter().map(|f| bytes(&run.join(f))).collect();
    assert!(before == after, "a refused start changed the run's files");
    // The model is readable by others, as the run's other files are (O07).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| std::fs::metadata(run.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("model.safetensors"), mode("run.json"));
    }
    // --overwrite replaces it; --resume and --overwrite together are refused.
    expect(
        &train_into(&run, &["--resume", "--overwrite"]),
        1,
        &["exclude each other"],
    );
    expect(&train_into(&run, &["--overwrite", "--set", "seed=3"]), 0, &["Recall@1"]);
    assert_ne!(bytes(&run.join("config.toml")), before[3]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn folders_that_are_not_runs_are_left_alone() {
    let d = scratch("foreign");
    // O05: a user's folder with folders named like rdml's.
    let user = d.join("user");
    std::fs::create_dir_all(user.join("checkpoint")).unwrap();
    std::fs::write(user.join("checkpoint/notes.txt"), "mine").unwrap();
    for extra in [&[][..], &["--overwrite"], &["--resume"]] {
        expect(&train_into(&user, extra), 1, &["not an rdml run folder"]);
    }
    assert_eq!(
        std::fs::read_to_string(user.join("checkpoint/notes.txt")).unwrap(),
        "mine"
    );
    // O06: links planted where the run writes are neither followed nor their targets touched.
    #[cfg(unix)]
    {
        let links = d.join("links");
        std::fs::create_dir_all(&links).unwrap();
        let victim = d.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, links.join("log.jsonl")).unwrap();
        std::os::unix::fs::symlink(&victim, links.join(".run.json.tmp")).unwrap();
        expect(&train_into(&links, &[]), 1, &["not an rdml run folder"]);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_reuses_a_run_only_with_the_same_config() {
    let d = scratch("compare");
    let out = d.to_str().unwrap();
    let args = |epochs: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "compare",
            "--configs",
            "quickstart",
            "--out",
            out,
            "--epochs",
            epochs,
            "--max-batches",
            "2",
            "--queries",
            "8",
            "--steps",
            "1",
            "--quiet",
            "--set",
            "eval.nmi=false",
            "--set",
            "train.sampler.pairs=32",
        ];
        a.extend(extra);
        a
    };
    expect(&rdml(&args("1", &[])), 0, &["| quickstart |"]);
    let model = bytes(&d.join("quickstart/model.safetensors"));
    // The same request reuses the run.
    expect(&rdml(&args("1", &[])), 0, &["| quickstart |"]);
    assert_eq!(bytes(&d.join("quickstart/model.safetensors")), model);
    // O04: another epoch count is refused, naming the key.
    expect(
        &rdml(&args("2", &[])),
        1,
        &["different configuration", "train.epochs", "--overwrite"],
    );
    expect(&rdml(&args("2", &["--overwrite"])), 0, &["| 2 |"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// Rewrites every F32 value of a safetensors file with `value`.
fn poison(path: &Path, value: f32) {
    let mut b = bytes(path);
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    for c in b[8 + n..].chunks_exact_mut(4) {
        c.copy_from_slice(&value.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn broken_models_are_refused_and_collapse_is_the_exit_status() {
    let (d, run) = scratch_with_run("broken", &[]);
    let r = run.to_str().unwrap();
    // M03/A16: NaN weights, named.
    let nan = d.join("nan");
    std::fs::create_dir_all(&nan).unwrap();
    for f in ["config.toml", "run.json", "model.safetensors"] {
        std::fs::copy(run.join(f), nan.join(f)).unwrap();
    }
    poison(&nan.join("model.safetensors"), f32::NAN);
    let n = nan.to_str().unwrap();
    expect(&rdml(&["eval", "--model", n]), 1, &["holds a NaN", "tensor "]);
    expect(
        &rdml(&[
            "attack",
            "--model",
            n,
            "--attack",
            "NN",
            "--queries",
            "8",
            "--steps",
            "1",
        ]),
        1,
        &["holds a NaN"],
    );
    // M02: a damaged file is called damaged, with what to do.
    let m = nan.join("model.safetensors");
    std::fs::copy(run.join("model.safetensors"), &m).unwrap();
    let full = bytes(&m);
    std::fs::write(&m, &full[..1000]).unwrap();
    expect(
        &rdml(&["eval", "--model", n]),
        1,
        &["model.safetensors", "damaged", "truncated"],
    );
    std::fs::write(&m, [0xAB; 4096]).unwrap();
    expect(
        &rdml(&["eval", "--model", n]),
        1,
        &["damaged", "not a safetensors file"],
    );
    // E04: eval --out a folder fails before evaluating, leaving nothing behind.
    let o = eval_out_folder(&d, r);
    assert!(std::fs::read_dir(&o).unwrap().next().is_none());
    // N01: a collapse within one epoch is the verdict and the exit status.
    let col = d.join("collapsed");
    expect(
        &train_into(&col, &["--set", "train.optimizer.lr=1000"]),
        3,
        &["COLLAPSED"],
    );
    let rep = String::from_utf8(bytes(&col.join("run.json"))).unwrap();
    assert!(rep.contains("\"verdict\": \"collapsed\""), "{rep}");
    expect(&rdml(&["eval", "--model", col.to_str().unwrap()]), 3, &["COLLAPSED"]);
    // N02: a margin no distance can reach is not a collapse.
    let o = train_into(&d.join("margin"), &["--set", "loss.margin=1000000"]);
    expect(&o, 0, &["Recall@1"]);
    assert!(!text(&o).contains("COLLAPSED"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

fn eval_out_folder(d: &Path, run: &str) -> PathBuf {
    let o = d.join("out-folder");
    std::fs::create_dir_all(&o).unwrap();
    let out = rdml(&["eval", "--model", run, "--out", o.to_str().unwrap()]);
    expect(&out, 1, &["is a folder; expected a file name"]);
    assert!(!text(&out).contains("Recall@1"), "evaluated before checking --out");
    o
}

#[test]
fn values_out_of_range_are_refused() {
    let d = scratch("range");
    let o = d.join("o");
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "eval.recall_ks=[1,5000]"], "Recall@5000 would be 1"),
        (&["--set", "train.sampler.pairs=100000"], "cap of 4096"),
        (
            &["--set", "model.embedding_dim=100000000"],
            "model.embedding_dim must be in",
        ),
        (
            &["--defense", "{kind=\"act\",eps=5,step=0.01,steps=2}"],
            "defense.eps = 5",
        ),
        (&["--defense", "garbage!!"], "kind is one of madry, est, act"),
        (&["--defense", ""], "expected an inline TOML table"),
        // Issue 28, family 8: the real cause, not a type error or a sign.
        (
            &["--set", "seed=18446744073709551615"],
            "18446744073709551615 is out of range (TOML integers are",
        ),
        (
            &["--defense", "{kind=\"act\",eps=inf,step=0.01,steps=2}"],
            "defense.eps must be a finite number, got inf",
        ),
        (&["--set", "eval.recall_ks=[1,1,2]"], "eval.recall_ks lists k = 1 twice"),
    ];
    for (extra, needle) in cases {
        expect(&train_into(&o, extra), 1, &[needle]);
        assert!(!o.exists(), "{extra:?} created the output folder");
    }
    // C19: a folder as the config.
    expect(
        &rdml(&["train", "--config", d.to_str().unwrap(), "--out", o.to_str().unwrap()]),
        1,
        &["is a folder; --config takes a TOML file"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn attack_options_out_of_range_are_refused() {
    let (d, run) = scratch_with_run("attack", &[]);
    let r = run.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--queries", "0"], "--queries must be ≥ 1"),
        (&["--batch", "0"], "--batch must be ≥ 1"),
        (&["--eps", "5"], "--eps 5 is an L∞ radius"),
        (&["--eps", "-1"], "--eps must be ≥ 0, got -1"),
    ];
    for (extra, needle) in cases {
        let mut a = vec!["attack", "--model", r, "--attack", "NN", "--steps", "1"];
        a.extend(*extra);
        expect(&rdml(&a), 1, &[needle]);
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// An IDX image file of `n` images of `rows × cols`, item `i` of class `i % 10` (as
/// [`idx_labels`] writes), each class a distinct gray level with a little texture.
fn idx_images(path: &Path, n: u32, rows: u32, cols: u32, pixels: bool) {
    let mut b = vec![0, 0, 8, 3];
    for v in [n, rows, cols] {
        b.extend(v.to_be_bytes());
    }
    if pixels {
        for i in 0..n {
            b.extend((0..rows * cols).map(|p| ((i % 10) * 25 + p % 7 + i % 3) as u8));
        }
    }
    std::fs::write(path, b).unwrap();
}

fn idx_labels(path: &Path, n: u32) {
    let mut b = vec![0, 0, 8, 1];
    b.extend(n.to_be_bytes());
    b.extend((0..n).map(|i| (i % 10) as u8));
    std::fs::write(path, b).unwrap();
}

#[test]
fn data_errors_come_before_anything_is_written() {
    let d = scratch("data");
    let o = d.join("o");
    let fm = |root: &Path, extra: &[&str]| {
        let root = format!("data.root={:?}", root.to_str().unwrap());
        let mut a = vec![
            "train",
            "--config",
            "fashion-c2f2-triplet",
            "--out",
            o.to_str().unwrap(),
            "--epochs",
            "1",
            "--max-batches",
            "2",
            "--quiet",
            "--set",
            "eval.nmi=false",
            "--set",
            "train.sampler.pairs=16",
            "--set",
        ];
        a.push(Box::leak(root.into_boxed_str()));
        a.extend(extra);
        rdml(&a)
    };
    // D06b: a valid, empty test split.
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    idx_images(&empty.join("train-images-idx3-ubyte"), 200, 28, 28, true);
    idx_labels(&empty.join("train-labels-idx1-ubyte"), 200);
    idx_images(&empty.join("t10k-images-idx3-ubyte"), 0, 28, 28, true);
    idx_labels(&empty.join("t10k-labels-idx1-ubyte"), 0);
    expect(&fm(&empty, &[]), 1, &["the test split is empty"]);
    assert!(!o.exists());
    // C11: more pairs than the 200 training items.
    expect(
        &fm(&empty, &["--set", "train.sampler.pairs=150"]),
        1,
        &[
            "a batch of 300 images is larger than the training split (200 items",
            "train.sampler.pairs",
        ],
    );
    // D06a: a header whose dimensions overflow names the file.
    idx_images(
        &empty.join("t10k-images-idx3-ubyte"),
        u32::MAX,
        u32::MAX,
        u32::MAX,
        false,
    );
    expect(&fm(&empty, &[]), 1, &["t10k-images-idx3-ubyte", "overflow"]);
    // E03: eval reads the test files alone.
    let test_only = d.join("test-only");
    std::fs::create_dir_all(&test_only).unwrap();
    idx_images(&test_only.join("t10k-images-idx3-ubyte"), 100, 28, 28, true);
    idx_labels(&test_only.join("t10k-labels-idx1-ubyte"), 100);
    let run = d.join("run");
    expect(&train_into(&run, &[]), 0, &[]);
    expect(
        &rdml(&[
            "eval",
            "--model",
            run.to_str().unwrap(),
            "--data",
            test_only.to_str().unwrap(),
        ]),
        0,
        &["Recall@1"],
    );
    // D11c/D12c: a bad image in the test split is found before training.
    let folder = d.join("folder");
    for (c, v) in [("a", 10u8), ("b", 60), ("c", 120), ("d", 200)] {
        std::fs::create_dir_all(folder.join(c)).unwrap();
        for i in 0..4 {
            image::RgbImage::from_pixel(20, 20, image::Rgb([v, i * 20, 0]))
                .save(folder.join(c).join(format!("{i}.png")))
                .unwrap();
        }
    }
    std::fs::write(folder.join("d").join("9.png"), b"not a png").unwrap();
    let cfg = d.join("folder.toml");
    let preset = rdml(&["presets", "quickstart"]);
    let text = String::from_utf8_lossy(&preset.stdout).replace(
        "dataset = \"fashion-mnist-embedded\"",
        &format!(
            "dataset = \"folder\"\nroot = {:?}\nresize = 20\ncrop = 16",
            folder.to_str().unwrap()
        ),
    );
    std::fs::write(&cfg, text).unwrap();
    let out = rdml(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "--epochs",
        "1",
        "--quiet",
        "--set",
        "train.sampler.pairs=2",
        "--set",
        "eval.recall_ks=[1]",
    ]);
    expect(&out, 1, &["9.png", "corrupt or unsupported image"]);
    assert!(!o.exists(), "training started before the test images were checked");
    let _ = std::fs::remove_dir_all(&d);
}

/// No output option writes over a run's own files (even with --overwrite), over an existing file
/// without --overwrite, or replaces a FIFO or a device it should write into (issue 28, family 1).
#[test]
fn output_options_never_clobber() {
    use std::os::unix::fs::FileTypeExt;
    let (d, run) = scratch_with_run("outputs", &[]);
    let r = run.to_str().unwrap();
    let own = ["model.safetensors", "run.json", "config.toml"];
    let before: Vec<Vec<u8>> = own.iter().map(|f| bytes(&run.join(f))).collect();
    let at = |f: &str| run.join(f).to_str().unwrap().to_string();
    for (cmd, f) in [
        ("embed", "model.safetensors"),
        ("eval", "run.json"),
        ("robustness", "config.toml"),
    ] {
        let o = rdml(&[cmd, "--model", r, "--out", &at(f), "--overwrite", "--quiet"]);
        expect(
            &o,
            1,
            &["--out: ", "is a file of the rdml run in", "choose another name"],
        );
    }
    let o = rdml(&[
        "bench-step",
        "--config",
        "quickstart",
        "--steps",
        "1",
        "--out",
        &at("run.json"),
        "--overwrite",
    ]);
    expect(&o, 1, &["is a file of the rdml run in"]);
    let after: Vec<Vec<u8>> = own.iter().map(|f| bytes(&run.join(f))).collect();
    assert_eq!(before, after, "a run's own files are untouched");

    // An unrelated existing file: refused, then replaced when asked.
    let mine = d.join("mine.npz");
    std::fs::write(&mine, b"unrelated").unwrap();
    let m = mine.to_str().unwrap();
    expect(
        &rdml(&["embed", "--model", r, "--out", m]),
        1,
        &["mine.npz exists; pass --overwrite to replace it"],
    );
    assert_eq!(bytes(&mine), b"unrelated");
    expect(
        &rdml(&["embed", "--model", r, "--out", m, "--overwrite"]),
        0,
        &["Wrote"],
    );
    assert_eq!(&bytes(&mine)[..2], b"PK");
    let j = d.join("m.json");
    let js = j.to_str().unwrap();
    expect(&rdml(&["eval", "--model", r, "--out", js, "--quiet"]), 0, &[]);
    expect(
        &rdml(&["eval", "--model", r, "--out", js, "--quiet"]),
        1,
        &["exists; pass --overwrite"],
    );
    expect(
        &rdml(&["eval", "--model", r, "--out", js, "--quiet", "--overwrite"]),
        0,
        &[],
    );

    // A FIFO is written into, and stays a FIFO.
    let fifo = d.join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let f = fifo.clone();
        std::thread::spawn(move || String::from_utf8(std::fs::read(f).unwrap()).unwrap())
    };
    expect(
        &rdml(&["eval", "--model", r, "--out", fifo.to_str().unwrap(), "--quiet"]),
        0,
        &[],
    );
    assert!(reader.join().unwrap().contains("\"recall@1\""));
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());

    // A device is written into, never replaced: /dev/full says it is full.
    let full = Path::new("/dev/full");
    if std::fs::metadata(full).is_ok_and(|m| m.file_type().is_char_device()) {
        expect(
            &rdml(&["eval", "--model", r, "--out", "/dev/full", "--quiet"]),
            1,
            &["cannot write /dev/full"],
        );
        assert!(std::fs::symlink_metadata(full).unwrap().file_type().is_char_device());
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A config's name is a folder under `compare --out`: one that would leave it is refused before
/// anything is written (issue 28, family 4).
#[test]
fn compare_run_names_stay_inside_out() {
    let d = scratch("compare-names");
    let out = d.join("out");
    for name in ["../x", "/tmp/x", "a/b", ".."] {
        let set = format!("name=\"{name}\"");
        let o = rdml(&[
            "compare",
            "--configs",
            "quickstart",
            "--set",
            &set,
            "--out",
            out.to_str().unwrap(),
            "--epochs",
            "1",
            "--max-batches",
            "1",
        ]);
        expect(&o, 1, &[&format!("name = '{name}'"), "expected a plain folder name"]);
    }
    assert!(!d.join("x").exists(), "nothing written beside --out");
    let _ = std::fs::remove_dir_all(&d);
}

/// A run folder whose name is not UTF-8 trains, and the commands that read it find its config
/// (issue 28, family 8: they said "config.toml: no such config file").
#[test]
fn a_run_folder_named_in_any_bytes_is_read_back() {
    use std::os::unix::ffi::OsStrExt;
    let d = scratch("bytes");
    let run = d.join(std::ffi::OsStr::from_bytes(b"run-\xff\xfe"));
    let mut a: Vec<&std::ffi::OsStr> = vec!["train".as_ref(), "--out".as_ref(), run.as_os_str()];
    a.extend(QUICK.iter().map(|s| std::ffi::OsStr::new(*s)));
    let o = Command::new(env!("CARGO_BIN_EXE_rdml")).args(&a).output().unwrap();
    expect(&o, 0, &[]);
    let o = Command::new(env!("CARGO_BIN_EXE_rdml"))
        .args([
            std::ffi::OsStr::new("eval"),
            "--model".as_ref(),
            run.as_os_str(),
            "--json".as_ref(),
        ])
        .output()
        .unwrap();
    expect(&o, 0, &["\"recall@1\""]);
    let _ = std::fs::remove_dir_all(&d);
}

/// `train --overwrite` keeps the replaced run whole until the new one has a complete
/// checkpoint: a replacement that fails, or is killed, before then leaves the old run
/// byte-identical (issue 28, family 2).
#[test]
fn a_failed_or_killed_replacement_leaves_the_old_run_whole() {
    let (d, run) = scratch_with_run("replace", &[]);
    let r = run.to_str().unwrap();
    let files = [
        "model.safetensors",
        "config.toml",
        "run.json",
        "log.jsonl",
        "report.html",
        "checkpoint/state.json",
    ];
    let before: Vec<Vec<u8>> = files.iter().map(|f| bytes(&run.join(f))).collect();
    let same = || files.iter().map(|f| bytes(&run.join(f))).collect::<Vec<_>>() == before;
    // Fails in its first epoch.
    let o = train_into(&run, &["--overwrite", "--set", "train.optimizer.lr=1e30"]);
    expect(&o, 1, &["the loss became NaN"]);
    assert!(same(), "the replaced run is back, byte for byte");
    assert!(!run.join(".rdml-replaced").exists());
    // Killed in its first epoch: the next train into the folder puts the old run back first.
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdml"))
        .args([
            "train",
            "--out",
            r,
            "--overwrite",
            "--config",
            "quickstart",
            "--quiet",
            "--epochs",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !run.join(".rdml-replaced").exists() && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        run.join(".rdml-replaced").is_dir(),
        "killed before its first checkpoint"
    );
    expect(&train_into(&run, &[]), 1, &["holds a finished run"]);
    assert!(same(), "the killed replacement is undone");
    expect(&rdml(&["eval", "--model", r, "--quiet"]), 0, &["Recall@1"]);
    // A replacement that reaches its first checkpoint stands, and the old run is gone.
    expect(&train_into(&run, &["--overwrite", "--set", "seed=5"]), 0, &[]);
    assert!(!run.join(".rdml-replaced").exists());
    assert_ne!(bytes(&run.join("model.safetensors")), before[0]);
    let _ = std::fs::remove_dir_all(&d);
}

/// A derived record names the weights it came from: the robustness scores of a run that was
/// then trained further are not shown as the new model's (issue 28, family 3).
#[test]
fn a_record_of_old_weights_is_not_shown_as_the_models() {
    let (d, run) = scratch_with_run("stale", &[]);
    let r = run.to_str().unwrap();
    let suite = ["robustness", "--model", r, "--queries", "8", "--steps", "1", "--quiet"];
    expect(&rdml(&suite), 0, &["ERS"]);
    let rec: serde_json::Value = serde_json::from_slice(&bytes(&run.join("robustness.json"))).unwrap();
    let digest = rec["model_digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("crc32:"), "{digest}");
    assert!(
        String::from_utf8(bytes(&run.join("report.html")))
            .unwrap()
            .contains("<b>ERS ")
    );
    // Trained on: the report drops the old scores and says why.
    let mut a = vec!["--resume"];
    a.extend(["--epochs", "2", "--max-batches", "3", "--quiet"]);
    let mut args = vec!["train", "--out", r, "--config", "quickstart"];
    args.extend(a);
    args.extend(["--set", "eval.nmi=false", "--set", "train.sampler.pairs=32"]);
    expect(&rdml(&args), 0, &[]);
    let page = String::from_utf8(bytes(&run.join("report.html"))).unwrap();
    assert!(!page.contains("<b>ERS "), "stale ERS shown");
    assert!(
        page.contains("was computed on other weights") && page.contains(&digest),
        "no stale note"
    );
    // Scored again: shown again.
    expect(&rdml(&suite), 0, &["ERS"]);
    assert!(
        String::from_utf8(bytes(&run.join("report.html")))
            .unwrap()
            .contains("<b>ERS ")
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `embed`'s `.npy` set carries a manifest, written last and removed first: a complete set
/// verifies, an interrupted or mixed one is refused (issue 28, family 7).
#[test]
fn an_npy_set_is_complete_or_recognisably_not() {
    let (d, run) = scratch_with_run("npyset", &[]);
    let r = run.to_str().unwrap();
    let e = d.join("e.npy");
    expect(
        &rdml(&["embed", "--model", r, "--out", e.to_str().unwrap()]),
        0,
        &["Wrote"],
    );
    rdml::embed::verify_set(&e).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&bytes(&d.join("e.set.json"))).unwrap();
    assert_eq!(manifest["members"].as_array().unwrap().len(), 4);
    assert!(manifest["meta"]["model_digest"].as_str().unwrap().starts_with("crc32:"));
    // A member from another set: inconsistent.
    let f = d.join("f.npy");
    let trained_more = ["--split", "train"];
    let mut a = vec!["embed", "--model", r, "--out", f.to_str().unwrap()];
    a.extend(trained_more);
    expect(&rdml(&a), 0, &["Wrote"]);
    std::fs::copy(d.join("f.labels.npy"), d.join("e.labels.npy")).unwrap();
    let err = rdml::embed::verify_set(&e).unwrap_err().to_string();
    assert!(
        err.contains("e.labels.npy: not the file") && err.contains("inconsistent"),
        "{err}"
    );
    // No manifest (a write interrupted between its renames): incomplete.
    std::fs::remove_file(d.join("e.set.json")).unwrap();
    let err = rdml::embed::verify_set(&e).unwrap_err().to_string();
    assert!(err.contains("no manifest: the set is incomplete"), "{err}");
    // The copied member is not the file rdml wrote: even --overwrite leaves it (issue 38); once
    // it is moved away, the set is rewritten whole.
    let over = ["embed", "--model", r, "--out", e.to_str().unwrap(), "--overwrite"];
    expect(&rdml(&over), 1, &["e.labels.npy exists and rdml did not write it"]);
    assert_eq!(bytes(&d.join("e.labels.npy")), bytes(&d.join("f.labels.npy")));
    std::fs::remove_file(d.join("e.labels.npy")).unwrap();
    expect(&rdml(&over), 0, &["Wrote"]);
    rdml::embed::verify_set(&e).unwrap();
    // A manifest naming a file outside the set (`../x`, an absolute path) is not read through;
    // a member that is a FIFO is refused before a read that would wait forever (issue 52).
    let good = bytes(&d.join("e.set.json"));
    for outside in ["../f.labels.npy", "/etc/hostname"] {
        let text = String::from_utf8(good.clone())
            .unwrap()
            .replace("\"e.labels.npy\"", &format!("{outside:?}"));
        std::fs::write(d.join("e.set.json"), text).unwrap();
        let err = format!("{:#}", rdml::embed::verify_set(&e).unwrap_err());
        assert!(err.contains("is not one of the set's files"), "{err}");
    }
    std::fs::write(d.join("e.set.json"), &good).unwrap();
    #[cfg(unix)]
    {
        std::fs::remove_file(d.join("e.labels.npy")).unwrap();
        let c = std::ffi::CString::new(d.join("e.labels.npy").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = format!("{:#}", rdml::embed::verify_set(&e).unwrap_err());
        assert!(err.contains("is a named pipe (FIFO), not a file"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Sizes from the command line are checked before allocation: a clear error, never an abort
/// (issue 38: `bench-step --random-images 3,100000,100000` aborted on a 30 TB allocation).
#[test]
fn random_images_past_the_batch_limit_are_refused() {
    for shape in ["3,100000,100000", "3,18446744073709551615,3"] {
        let o = rdml(&[
            "bench-step",
            "--config",
            "quickstart",
            "--random-images",
            shape,
            "--steps",
            "1",
        ]);
        expect(&o, 1, &["--random-images", "beyond rdml's limit of 16 GiB"]);
    }
}

/// The command line's defaults are the library's (`rdml::scoring::defaults`, which the Python
/// package's keywords are checked against in `python/tests/test_model.py`): one default per
/// option, whichever front end runs the job (issue 39).
#[test]
fn the_command_lines_defaults_are_the_librarys() {
    use rdml::scoring::defaults as d;
    let default_of = |help: &str, flag: &str| -> String {
        let at = help
            .find(&format!("{flag} <"))
            .unwrap_or_else(|| panic!("{flag} in:\n{help}"));
        let rest = &help[at..];
        let next_flag = rest[2..].find("\n  -").map_or(rest.len(), |i| i + 2);
        let section = &rest[..next_flag];
        let i = section
            .find("[default: ")
            .unwrap_or_else(|| panic!("{flag} has no default:\n{section}"));
        section[i + 10..].split(']').next().unwrap().to_string()
    };
    for cmd in ["attack", "robustness", "compare", "embed"] {
        let o = rdml(&[cmd, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(default_of(&help, "--queries"), d::QUERIES.to_string(), "{cmd}");
        assert_eq!(default_of(&help, "--batch"), d::BATCH.to_string(), "{cmd}");
        assert_eq!(default_of(&help, "--seed"), d::SEED.to_string(), "{cmd}");
        assert_eq!(default_of(&help, "--method"), d::METHOD, "{cmd}");
        assert_eq!(default_of(&help, "--profile"), d::PROFILE, "{cmd}");
        if cmd == "attack" || cmd == "robustness" {
            assert_eq!(default_of(&help, "--repeats"), d::REPEATS.to_string(), "{cmd}");
        }
    }
    let report = String::from_utf8_lossy(&rdml(&["report", "--help"]).stdout).into_owned();
    assert_eq!(default_of(&report, "--grid"), rdml::html::GRID_QUERIES.to_string());
    // The library's requests start from the same defaults.
    let o = rdml::scoring::options::ScoringOptions::default();
    assert_eq!((o.queries, o.batch, o.seed), (d::QUERIES, d::BATCH, d::SEED));
    assert_eq!((o.method.as_str(), o.profile.name()), (d::METHOD, d::PROFILE));
    assert_eq!(rdml::scoring::model::ModelScoring::default().options, o);
}

/// `rdml robustness --json` prints the record `Run.robustness` returns (the same library call
/// and serialisation), which is also the run's robustness.json (issue 39).
#[test]
fn robustness_json_is_the_record() {
    let (d, run) = scratch_with_run("robjson", &[]);
    let r = run.to_str().unwrap();
    let o = rdml(&["robustness", "--model", r, "--queries", "8", "--steps", "2", "--json"]);
    expect(&o, 0, &[]);
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stored: serde_json::Value = serde_json::from_slice(&bytes(&run.join("robustness.json"))).unwrap();
    assert_eq!(printed, stored);
    assert_eq!(printed["queries"].as_u64(), Some(8));
    assert!(printed["table"]["ers"].as_f64().is_some());
    let _ = std::fs::remove_dir_all(&d);
}

/// A run folder's files are rdml's only while its record proves it (issue 38): a file of a run's
/// name that the user put or changed stops `train --overwrite`, `--resume` and `report` before any
/// work and stays byte for byte; a run an earlier version wrote (no record) is recorded as it is,
/// with a note, and replaced as before.
#[test]
fn a_run_file_rdml_cannot_prove_it_wrote_is_never_replaced() {
    let (d, run) = scratch_with_run("record", &[]);
    let r = run.to_str().unwrap();
    let model = bytes(&run.join("model.safetensors"));
    // The user's own grid.json, and then a config.toml edited by hand.
    std::fs::write(run.join("grid.json"), b"my grid").unwrap();
    for extra in [&["--overwrite"][..], &["--resume"]] {
        expect(
            &train_into(&run, extra),
            1,
            &["grid.json: rdml did not write this file"],
        );
    }
    assert_eq!(bytes(&run.join("grid.json")), b"my grid");
    std::fs::write(run.join("report.html"), b"my page").unwrap();
    expect(
        &rdml(&["report", r]),
        1,
        &["report.html exists and rdml did not write it"],
    );
    assert_eq!(bytes(&run.join("report.html")), b"my page");
    std::fs::remove_file(run.join("report.html")).unwrap();
    assert_eq!(bytes(&run.join("model.safetensors")), model);
    assert!(!run.join(".rdml-replaced").exists());
    std::fs::remove_file(run.join("grid.json")).unwrap();
    let config = run.join("config.toml");
    let edited = [bytes(&config), b"# my note\n".to_vec()].concat();
    std::fs::write(&config, &edited).unwrap();
    expect(
        &train_into(&run, &["--overwrite"]),
        1,
        &["config.toml: rdml did not write this file"],
    );
    assert_eq!(bytes(&config), edited);
    std::fs::write(&config, &edited[..edited.len() - 10]).unwrap();
    // A run without a record (an earlier version's): recorded as it is, then replaced.
    std::fs::remove_file(run.join(".rdml-files.json")).unwrap();
    std::fs::write(run.join(".rdml-run"), b"{\"rdml_version\":\"0.1.0\"}\n").unwrap();
    expect(
        &train_into(&run, &["--overwrite", "--set", "seed=5"]),
        0,
        &["a run written before rdml recorded its files", "model.safetensors"],
    );
    assert_ne!(bytes(&run.join("model.safetensors")), model);
    let ledger = String::from_utf8(bytes(&run.join(".rdml-files.json"))).unwrap();
    for f in [
        "model.safetensors",
        "config.toml",
        "run.json",
        "log.jsonl",
        "report.html",
    ] {
        assert!(ledger.contains(&format!("\"{f}\"")), "{f} recorded: {ledger}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// The family "folder outputs inside a run" (issue 52: `compare --out RUN/checkpoint` was taken
/// and the run's next `train --resume` removed the comparison): no output that is a folder or
/// lands in one goes into a folder a run keeps for itself, nor takes a name rdml keeps for its
/// bookkeeping, whatever the command or front end; the run resumes untouched.
#[test]
fn no_output_goes_into_a_runs_own_folders() {
    let (d, run) = scratch_with_run("ownfolders", &[]);
    let r = run.to_str().unwrap();
    let ckpt = run.join("checkpoint");
    let before: Vec<_> = std::fs::read_dir(&ckpt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    // Each way into the run's own folders: as written, through a folder not made yet and `..`
    // (resolved as it will be once made), and through a link to the checkpoint then a new folder.
    let link = d.join("lnk");
    std::os::unix::fs::symlink(&ckpt, &link).unwrap();
    let kept = ["a folder the rdml run in", "keeps for itself"];
    let up = ["goes up ('..') out of", "a folder that does not exist yet"];
    // The checkpoint under another name, as a bind mount would show it (a copy of its files).
    let alias = d.join("alias");
    std::fs::create_dir_all(&alias).unwrap();
    for f in ["state.json", "model.bpk"] {
        std::fs::copy(ckpt.join(f), alias.join(f)).unwrap();
    }
    let by_content = ["it holds a run's checkpoint or replaced run", "keeps for itself"];
    let ways = [
        (run.clone(), "checkpoint", ".rdml-replaced", kept),
        (run.join("nx"), "../checkpoint", "../.rdml-replaced", up),
        (link.clone(), "new", "new", kept),
        (alias.clone(), "new", "new", by_content),
    ];
    for (base, ckpt_way, replaced_way, said) in &ways {
        let inside = |p: &str| base.join(p).to_str().unwrap().to_string();
        let (compare_out, train_out) = (inside(ckpt_way), inside(&format!("{ckpt_way}/x")));
        let import_out = inside(&format!("{ckpt_way}/imp"));
        let examples_out = inside(&format!("{replaced_way}/ex"));
        let model = run.join("model.safetensors").to_str().unwrap().to_string();
        let mut train = vec!["train", "--out", &train_out];
        train.extend(QUICK);
        for args in [
            vec![
                "compare",
                "--configs",
                "quickstart",
                "--out",
                &compare_out,
                "--epochs",
                "1",
                "--max-batches",
                "1",
            ],
            train,
            vec!["import", "--from", &model, "--arch", "c2f2", "--out", &import_out],
            vec![
                "attack",
                "--model",
                r,
                "--attack",
                "ES",
                "--queries",
                "2",
                "--save-examples",
                &examples_out,
            ],
        ] {
            expect(&rdml(&args), 1, said);
        }
        // A file output there: refused before any work, and before any folder is made.
        let out = inside(&format!("{ckpt_way}/sub/m.json"));
        expect(&rdml(&["eval", "--model", r, "--out", &out]), 1, said);
    }
    assert!(!run.join("nx").exists(), "a folder was made before the refusal");
    // A file output named as a ledger, anywhere.
    let ledger = d.join(".rdml-files.json");
    let o = rdml(&["eval", "--model", r, "--out", ledger.to_str().unwrap()]);
    expect(&o, 1, &["is a name rdml keeps for its own bookkeeping"]);
    assert!(!ledger.exists());
    // Python's out= (the library's one check for it).
    let e = format!(
        "{:#}",
        rdml::out_folder::check(&ckpt.join("scored"), &["robustness.json"]).unwrap_err()
    );
    assert!(e.contains("keeps for itself"), "{e}");
    let after: Vec<_> = std::fs::read_dir(&ckpt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before, after, "the checkpoint folder is as the run left it");
    assert!(!run.join(".rdml-replaced").exists());
    let mut resume = vec!["train", "--out", r, "--resume"];
    resume.extend(QUICK);
    let epochs = resume.iter().position(|a| *a == "1").unwrap();
    resume[epochs] = "2";
    expect(&rdml(&resume), 0, &[]);
    let _ = std::fs::remove_dir_all(&d);
}

/// The family "a damaged ledger's way forward" (issue 52: a deleted or damaged
/// `.rdml-files.json` left a finished run unusable, with serde's words and "rdml did not write
/// this file" about rdml's own model): a damaged ledger is said as damaged with what to do; once
/// it is gone, what rdml's other records prove is re-recorded and the rest named, and the run
/// resumes once the named file is moved away.
#[test]
fn a_lost_ledger_has_a_way_forward() {
    let (d, run) = scratch_with_run("lostledger", &[]);
    let r = run.to_str().unwrap();
    let ledger = run.join(".rdml-files.json");
    std::fs::write(&ledger, br#"{"files": {"run.json": 3}}"#).unwrap();
    let mut resume = vec!["train", "--out", r, "--resume"];
    resume.extend(QUICK);
    let epochs = resume.iter().position(|a| *a == "1").unwrap();
    resume[epochs] = "2";
    let o = rdml(&resume);
    expect(
        &o,
        1,
        &[
            "is not a ledger rdml wrote (JSON, but not a ledger's layout)",
            "move it aside",
        ],
    );
    assert!(!text(&o).contains("untagged enum"), "{}", text(&o));
    std::fs::rename(&ledger, d.join("ledger.damaged")).unwrap();
    // A copy whose page the user edited: the page's seal no longer holds, so it is theirs.
    let edited = d.join("edited");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&run)
            .arg(&edited)
            .status()
            .unwrap()
            .success()
    );
    let mut page = bytes(&edited.join("report.html"));
    page.splice(0..0, b"<!-- my note -->".iter().copied());
    std::fs::write(edited.join("report.html"), &page).unwrap();
    let o = rdml(&resume);
    expect(
        &o,
        0,
        &[
            "re-recorded the files its other records prove it wrote (model.safetensors, config.toml, run.json, log.jsonl, report.html, grid.json)",
            "Wrote",
        ],
    );
    let e = edited.to_str().unwrap();
    let resume_edited: Vec<&str> = resume.iter().map(|a| if *a == r { e } else { a }).collect();
    let o = rdml(&resume_edited);
    expect(
        &o,
        1,
        &[
            "(model.safetensors, config.toml, run.json, log.jsonl, grid.json)",
            "left as the user's: report.html",
            "report.html: rdml did not write this file",
        ],
    );
    std::fs::rename(edited.join("report.html"), d.join("report.html")).unwrap();
    expect(&rdml(&resume_edited), 0, &["Wrote"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 52: `train.sampler.pairs = 2` trains (every batch holds two classes; a batch of one had
/// no negative and a NaN loss), and a run that does diverge is told a true cause: after an update,
/// the learning rate, named with its value.
#[test]
fn what_trains_trains_and_divergence_is_told_truly() {
    let d = scratch("diverge");
    let o = train_into(
        &d.join("pairs2"),
        &["--set", "train.sampler.pairs=2", "--set", "train.max_batches=100"],
    );
    expect(&o, 0, &["Wrote"]);
    let o = train_into(&d.join("lr"), &["--set", "train.optimizer.lr=1e8"]);
    expect(&o, 1, &["training diverged; lower train.optimizer.lr (now 100000000)"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 52: a surrogate trained on images of another shape is said as that, not as burn's
/// `ShapeMismatch`.
#[test]
fn a_surrogate_of_other_images_is_said_as_such() {
    let (d, run) = scratch_with_run("surrogate-shape", &[]);
    let rgb = d.join("rgb");
    let data = "data={dataset=\"synthetic\",synthetic={shape=[3,28,28],sigma=0.1,train=64,test=64}}";
    expect(
        &train_into(&rgb, &["--set", data, "--set", "train.sampler.pairs=8"]),
        0,
        &["Wrote"],
    );
    let o = rdml(&[
        "robustness",
        "--model",
        run.to_str().unwrap(),
        "--surrogate",
        rgb.to_str().unwrap(),
        "--queries",
        "4",
    ]);
    expect(
        &o,
        1,
        &[
            "its model takes images of another shape than these 1×28×28 ones",
            "data.dataset = \"synthetic\"",
        ],
    );
    assert!(!text(&o).contains("ShapeMismatch"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// The family "a pipe where a file is read" (issue 52): a FIFO or a device where rdml reads a
/// file (a run's marker, run.json, config.toml, model, a --config, a data set's IDX file) is
/// named as what it is, never taken for a missing file ("no such config file", "an interrupted
/// run", "os error 22"), and nothing waits on it.
#[test]
fn a_pipe_where_a_file_is_read_is_named_as_one() {
    let (d, run) = scratch_with_run("pipes", &[]);
    let r = run.to_str().unwrap();
    let mkfifo = |p: &Path| {
        assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
    };
    for name in [".rdml-run", "run.json", "config.toml", "model.safetensors"] {
        let p = run.join(name);
        let kept = d.join(format!("kept-{name}"));
        std::fs::rename(&p, &kept).unwrap();
        mkfifo(&p);
        let fifo = format!("{} is a named pipe (FIFO), not a file", p.display());
        expect(&rdml(&["eval", "--model", r, "--quiet"]), 1, &[&fifo]);
        let mut resume = vec!["train", "--out", r, "--overwrite"];
        resume.extend(QUICK);
        expect(&rdml(&resume), 1, &[&fifo]);
        std::fs::remove_file(&p).unwrap();
        std::fs::rename(&kept, &p).unwrap();
    }
    let pipe = d.join("pipe.toml");
    mkfifo(&pipe);
    let said = format!("{} is a named pipe (FIFO), not a file", pipe.display());
    expect(
        &rdml(&["train", "--config", pipe.to_str().unwrap(), "--out", "/nonexistent/x"]),
        1,
        &[&said],
    );
    expect(
        &rdml(&["train", "--config", "/dev/zero", "--out", "/nonexistent/x"]),
        1,
        &["/dev/zero is a device, not a file"],
    );
    let idx = d.join("idx");
    std::fs::create_dir_all(&idx).unwrap();
    mkfifo(&idx.join("t10k-images-idx3-ubyte"));
    let o = rdml(&["eval", "--model", r, "--data", idx.to_str().unwrap(), "--quiet"]);
    expect(&o, 1, &["t10k-images-idx3-ubyte is a named pipe (FIFO), not a file"]);
    expect(&rdml(&["eval", "--model", r, "--quiet"]), 0, &[]);
    // What is wrong and what to do, in rdml's words: a device as the data's folder, a config
    // missing a key, a dangling link as an output folder, a damaged checkpoint state.
    let o = rdml(&["eval", "--model", r, "--data", "/dev/zero", "--quiet"]);
    expect(&o, 1, &["/dev/zero: is a device, not a folder"]);
    let config = d.join("c.toml");
    std::fs::write(&config, "[data]\n").unwrap();
    let o = rdml(&["train", "--config", config.to_str().unwrap(), "--out", "/nonexistent/x"]);
    expect(&o, 1, &["the key dataset is required here and missing"]);
    assert!(!text(&o).contains("missing field"), "{}", text(&o));
    let dangling = d.join("dangling");
    std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
    let mut train = vec!["train", "--out", dangling.to_str().unwrap()];
    train.extend(QUICK);
    expect(&rdml(&train), 1, &["is a symbolic link that leads nowhere"]);
    std::fs::write(run.join("checkpoint/state.json"), br#"{"epoch": -1}"#).unwrap();
    let mut resume = vec!["train", "--out", r, "--resume"];
    resume.extend(QUICK);
    expect(&rdml(&resume), 1, &["state.json: no epochs_done count", "--overwrite"]);
    let _ = std::fs::remove_dir_all(&d);
}
