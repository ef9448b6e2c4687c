//! `rdml import` against PyTorch: the fixtures of `tools/make_import_fixtures.py` (each layout
//! built and saved by its own tool, with PyTorch's embeddings of fixed images) are imported with
//! the command a user runs, and the run folder's model must give PyTorch's embeddings within
//! 1e-4 (relative). Then the bad inputs: each one error naming the file and the key, exit 1, and
//! no run folder left behind.

use burn::tensor::{Device, Tensor, TensorData};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIXTURES: &str = "tests/fixtures/import";

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-import-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn gunzip(name: &str) -> Vec<u8> {
    let f = std::fs::File::open(Path::new(FIXTURES).join(format!("{name}.gz"))).unwrap();
    let mut v = Vec::new();
    flate2::read::GzDecoder::new(f).read_to_end(&mut v).unwrap();
    v
}

fn rdml(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdml")).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Imports case `c` (its files unpacked into `dir`) into `dir/run`.
fn import_case(c: &serde_json::Value, dir: &Path, extra: &[&str]) -> PathBuf {
    let files: Vec<PathBuf> = c["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let f = f.as_str().unwrap();
            let p = dir.join(f);
            std::fs::write(&p, gunzip(f)).unwrap();
            p
        })
        .collect();
    let out = dir.join("run");
    let mut args: Vec<String> = vec!["import".into(), "--from".into(), files[0].display().to_string()];
    if let Some(e) = files.get(1) {
        args.extend(["--embedder".into(), e.display().to_string()]);
    }
    args.extend(["--arch".into(), c["arch"].as_str().unwrap().into()]);
    args.extend(["--out".into(), out.display().to_string()]);
    args.extend(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    args.extend(extra.iter().map(|a| a.to_string()));
    let o = rdml(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}: {}", c["name"], stderr(&o));
    out
}

#[test]
fn imported_models_embed_as_pytorch_does() {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(FIXTURES).join("manifest.json")).unwrap()).unwrap();
    let dev = Device::default();
    let mut seen = Vec::new();
    for c in manifest["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let dir = tmp(name);
        let run = import_case(c, &dir, &[]);
        let shape: Vec<usize> = c["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let (_, net) = rdml::train::load_model(&run, [shape[1], shape[2], shape[3]], &dev).unwrap();
        let pixels: Vec<f32> = gunzip(&format!("{}.u8", c["images"].as_str().unwrap()))
            .iter()
            .map(|&b| b as f32 / 255.0)
            .collect();
        let x = Tensor::<4>::from_data(TensorData::new(pixels, shape.clone()), &dev);
        let got = rdml::host::read(&net.forward(x)).unwrap();
        let want: Vec<f32> = c["embeddings"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
        assert!(err < 1e-4, "{name}: max |rdml − torch| / max |torch| = {err:.2e}");
        // The record says what was read; nothing left over in these layouts.
        let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("import.json")).unwrap()).unwrap();
        assert!(rec["unused"].as_array().unwrap().is_empty(), "{name}: {rec}");
        assert!(rec["missing"].as_array().unwrap().is_empty(), "{name}: {rec}");
        seen.push((name.to_string(), rec["layout"].as_str().unwrap().to_string(), err));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let layouts: Vec<&str> = seen.iter().map(|s| s.1.as_str()).collect();
    for l in ["state_dict", "robrank", "pytorch-metric-learning", "key-map"] {
        assert!(layouts.contains(&l), "no fixture of layout {l}: {seen:?}");
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
    eprintln!("relative errors: {seen:?}");
}

/// A Lightning checkpoint's weights sit under `state_dict`; its optimiser state and the BN
/// counters are reported, not used; the imported run is finished, evaluates on the embedded
/// data, and `train --resume` fine-tunes it.
#[test]
fn a_robrank_checkpoint_becomes_a_run_every_command_reads() {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(FIXTURES).join("manifest.json")).unwrap()).unwrap();
    let c = manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "robrank-rc2f2")
        .unwrap();
    let dir = tmp("robrank-cli");
    let run = import_case(c, &dir, &["--set", "train.max_batches=2"]);
    let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("import.json")).unwrap()).unwrap();
    assert_eq!(rec["root"], "state_dict");
    assert_eq!(rec["layout"], "robrank");
    assert_eq!(rec["filled"].as_object().unwrap().len(), 8);
    assert_eq!(rec["filled"]["backbone.9.weight"], "backbone.C2f2.fc2.weight");
    let r = run.display().to_string();
    let o = rdml(&["eval", "--model", &r, "--json"]);
    assert!(o.status.success() || o.status.code() == Some(3), "{}", stderr(&o));
    let m: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(m["recall@1"].as_f64().unwrap() > 0.0, "{m}");
    let cfg = run.join("config.toml").display().to_string();
    let o = rdml(&[
        "train", "--config", &cfg, "--out", &r, "--resume", "--epochs", "1", "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let runjson: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(runjson["epochs"].as_array().unwrap().len(), 1);
    assert_eq!(runjson["completed"], true);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs an import expected to fail; returns its message after checking exit 1 and no folder.
fn refused(dir: &Path, args: &[&str]) -> String {
    let out = dir.join("refused");
    let mut a = vec!["import", "--out", out.to_str().unwrap()];
    a.extend(args);
    let o = rdml(&a);
    assert_eq!(o.status.code(), Some(1), "{a:?}: {}", stderr(&o));
    assert!(!out.exists(), "{a:?} left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let e = stderr(&o);
    assert!(!e.contains("panicked"), "{e}");
    e
}

#[test]
fn bad_checkpoints_are_refused_naming_the_file_and_key() {
    let dir = tmp("bad");
    let put = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let tv = gunzip("torchvision-resnet18.pth");
    let good = put("tv.pth", &tv);

    let e = refused(
        &dir,
        &["--from", &put("notes.pth", b"just some text\n"), "--arch", "c2f2"],
    );
    assert!(e.contains("notes.pth: not a checkpoint"), "{e}");
    let e = refused(
        &dir,
        &["--from", &put("cut.pth", &tv[..tv.len() / 2]), "--arch", "resnet18"],
    );
    assert!(e.contains("cut.pth") && e.contains("truncated or damaged"), "{e}");
    let e = refused(
        &dir,
        &["--from", &put("evil.pth", &gunzip("evil.pth")), "--arch", "c2f2"],
    );
    assert!(
        e.contains("evil.pth: the pickle calls `posix.system` (at key 'payload')"),
        "{e}"
    );
    // The same call passed as a tensor rebuild's hooks argument, which the reader consumes: found
    // in the pickle's opcodes (issue 38; made by `torch.save` of an object reducing to
    // `_rebuild_tensor_v2(storage, 0, (4,), (1,), False, os.system("true"))`).
    let e = refused(
        &dir,
        &[
            "--from",
            &put("hidden.pth", &gunzip("hidden-call.pth")),
            "--arch",
            "c2f2",
        ],
    );
    assert!(e.contains("hidden.pth: the pickle calls `posix.system`"), "{e}");
    // A call the reader cannot even build (`os.system` as a rebuild's storage argument) is said
    // by its name, not as a damaged file (issue 52).
    let mut p = b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01".to_vec();
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x02(cos\nsystem\nX\x01\x00\x00\x00x\x85Rtq\x03Rs.");
    let e = refused(&dir, &["--from", &put("unreadable.pkl", &p), "--arch", "c2f2"]);
    assert!(e.contains("unreadable.pkl: the pickle calls `os.system`"), "{e}");
    let e = refused(&dir, &["--from", &good, "--arch", "resnet50"]);
    assert!(e.contains("tv.pth") && e.contains("looks like a ResNet-18"), "{e}");
    assert!(e.contains("layer1.0.bn1.weight") || e.contains("layer1.0.conv"), "{e}");
    let e = refused(&dir, &["--from", &good, "--arch", "resnet18", "--embedding-dim", "128"]);
    assert!(
        e.contains("embedding layer has 64 outputs, not --embedding-dim 128"),
        "{e}"
    );
    let e = refused(&dir, &["--from", &good, "--arch", "resnet18", "--key-map", "nonsense"]);
    assert!(e.contains("expected OLD=NEW"), "{e}");

    // NaN weights, in a safetensors file.
    let mut values = vec![0.5f32; 32 * 5 * 5];
    values[7] = f32::NAN;
    let bytes: &[u8] = bytemuck::cast_slice(&values);
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![32, 1, 5, 5], bytes).unwrap();
    let st = safetensors::serialize(vec![("conv1.weight".to_string(), view)], None).unwrap();
    let e = refused(&dir, &["--from", &put("nan.safetensors", &st), "--arch", "c2f2"]);
    assert!(e.contains("nan.safetensors: tensor conv1.weight holds a NaN"), "{e}");
    // An empty tensor declaring huge sizes (issue 52): the sizes the model is built with come
    // from tensors that hold their values, never a panic or an allocation of 2^33 channels.
    for (name, shape) in [
        ("conv1.weight", vec![0, 1usize << 63]),
        ("fc1.weight", vec![0, 1 << 33]),
    ] {
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), &[]).unwrap();
        let st = safetensors::serialize(vec![(name.to_string(), view)], None).unwrap();
        let e = refused(&dir, &["--from", &put("empty.safetensors", &st), "--arch", "c2f2"]);
        assert!(
            e.contains(&format!(
                "empty.safetensors: tensor {name} of shape {shape:?} holds 0 values"
            )),
            "{e}"
        );
    }

    // Left-over tensors and missing parameters: refused unless allowed, then listed.
    let trunk = put("trunk.pth", &gunzip("pml-trunk.pth"));
    let e = refused(&dir, &["--from", &trunk, "--arch", "resnet50"]);
    assert!(
        e.contains("no embedding layer found") && e.contains("--embedding-dim"),
        "{e}"
    );
    let e = refused(&dir, &["--from", &trunk, "--arch", "resnet50", "--embedding-dim", "64"]);
    assert!(e.contains("trunk.pth: 2 parameter(s) of rdml's ResNet-50 are not in the file: backbone.Resnet50.fc.bias, backbone.Resnet50.fc.weight"), "{e}");
    let renamed = [
        "--from",
        &good,
        "--arch",
        "resnet18",
        "--embedding-dim",
        "64",
        "--key-map",
        "fc.=classifier.",
        "--allow-missing",
    ];
    let e = refused(&dir, &renamed);
    assert!(
        e.contains("tv.pth: 2 tensor(s) fit no parameter of rdml's ResNet-18: fc.bias, fc.weight; pass --allow-unused"),
        "{e}"
    );
    let out = dir.join("allowed");
    let mut a = vec!["import", "--out", out.to_str().unwrap(), "--allow-unused"];
    a.extend(renamed);
    let o = rdml(&a);
    assert!(o.status.success(), "{}", stderr(&o));
    let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("import.json")).unwrap()).unwrap();
    assert_eq!(rec["unused"], serde_json::json!(["fc.bias", "fc.weight"]));
    assert_eq!(
        rec["missing"],
        serde_json::json!(["backbone.Resnet18.fc.bias", "backbone.Resnet18.fc.weight"])
    );
    // An existing run is replaced only when asked.
    let o = rdml(&a);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("holds an rdml run: pass --overwrite"),
        "{}",
        stderr(&o)
    );
    a.push("--overwrite");
    assert!(rdml(&a).status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
