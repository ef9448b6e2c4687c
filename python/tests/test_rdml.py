"""The Python package against the library it wraps: the same numbers as the command line, its
errors as Python exceptions. One quickstart run (1 epoch, 6 batches) is shared by the tests."""

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rdml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "q"
    # set= as keys and values (a table and NumPy scalars too): the library writes them as TOML.
    overrides = {"eval.nmi": False, "train.sampler": {"kind": "spc2", "pairs": np.int64(128)}, "loss.margin": np.float64(0.2)}
    return rdml.train("quickstart", out, epochs=1, max_batches=6, set=overrides, quiet=True)


def test_train_writes_a_run_with_its_config_and_metrics(run):
    assert run.config["name"] == "quickstart"
    assert run.config["train"]["epochs"] == 1 and run.config["train"]["max_batches"] == 6
    assert run.config["train"]["sampler"]["pairs"] == 128 and run.config["eval"]["nmi"] is False
    assert len(run.epochs) == 1
    m = run.metrics
    assert 0.1 < m["recall@1"] <= 1.0 and m["queries"] == 2000
    assert set(m) >= {"recall@1", "recall@8", "map@r", "map@10", "map", "r_precision", "pi_ratio", "lone_queries"}
    assert (Path(run.path) / "report.html").is_file() and (Path(run.path) / "model.safetensors").is_file()


def test_metrics_of_the_exported_embeddings_are_the_runs(run):
    emb, labels, ids = run.embed_split("test")
    assert emb.shape == (2000, 512) and emb.dtype == np.float32
    assert labels.shape == (2000,) and ids.tolist() == list(range(2000))
    got = rdml.metrics(emb, labels, nmi=False)
    for k in ("recall@1", "recall@2", "recall@4", "recall@8", "map@r", "map@10", "map", "r_precision"):
        assert got[k] == run.metrics[k], k
    # π_ratio sums per class in parallel: equal to the last bits.
    assert got["pi_ratio"] == pytest.approx(run.metrics["pi_ratio"], rel=1e-12)
    # float64 input, labels renamed: the same ranking, the same numbers.
    again = rdml.metrics(emb.astype(np.float64), labels * 7 - 3, nmi=False)
    assert again["recall@1"] == got["recall@1"] and again["map@r"] == got["map@r"]
    # Unit rows: cosine ranks as Euclidean does.
    assert rdml.metrics(emb, labels, nmi=False, distance="cosine")["recall@1"] == got["recall@1"]


def test_attacked_embeddings_are_the_command_lines(run, tmp_path):
    # One job, two front ends: Run.embed_split(attack=…) gives what `rdml embed --attack` writes.
    clean, _, _ = run.embed_split("test")
    adv, labels, ids = run.embed_split("test", attack="ES", steps=2, queries=16, batch=16)
    out = tmp_path / "adv.npz"
    subprocess.run(
        [str(ROOT / "target/release/rdml"), "--quiet", "embed", "--model", run.path,
         "--attack", "ES", "--steps", "2", "--queries", "16", "--batch", "16", "--out", str(out)],
        check=True, capture_output=True,
    )
    cli = np.load(out)
    assert np.array_equal(cli["embeddings"], adv) and np.array_equal(cli["labels"], labels)
    # The first 16 test items, attacked: they moved from their clean embeddings.
    assert adv.shape == (16, 512) and ids.tolist() == list(range(16))
    assert not np.allclose(adv, clean[:16])
    with pytest.raises(ValueError, match="attack= attacks test items: use it with split= test"):
        run.embed_split("train", attack="ES")


def test_metrics_by_hand():
    # Two classes on a line: every item's nearest neighbour shares its class but item 2's (0.7,
    # nearer 1.0 than 0.1).
    e = np.array([[0.0], [0.1], [0.7], [1.0], [1.1]], dtype=np.float32)
    m = rdml.metrics(e, [0, 0, 0, 1, 1], recall_ks=(1,), nmi=False, pi_ratio=False)
    assert m["recall@1"] == pytest.approx(4 / 5)
    assert m["queries"] == 5 and m["lone_queries"] == 0
    # Against a gallery: both queries' nearest gallery item is 0.7 (class 0): one hit in two.
    g = rdml.metrics(e[:2], [0, 1], gallery=e[2:], gallery_labels=[0, 1, 1], recall_ks=(1,), nmi=False, pi_ratio=False)
    assert g["recall@1"] == pytest.approx(0.5)
    # A NaN would rank arbitrarily: the library refuses it, naming the array and its place.
    bad = e.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match=r"embeddings: contains NaN or infinite values \(row 3, column 0\)"):
        rdml.metrics(bad, [0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"gallery: contains NaN or infinite values \(row 1"):
        rdml.metrics(e[:2], [0, 1], gallery=bad[2:], gallery_labels=[0, 1, 1])


def test_embed_images_is_the_models_embedding(run):
    rng = np.random.default_rng(0)
    x = rng.random((5, 1, 28, 28), dtype=np.float32)
    e = run.embed(x, batch=2)
    assert e.shape == (5, 512)
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-4)  # l2_normalize = true
    # Batches of another size: the same embeddings up to the GEMM's rounding.
    assert np.allclose(run.embed(x[:1]), e[:1], atol=1e-5)
    with pytest.raises(ValueError, match="N × C × H × W"):
        run.embed(x[0])
    with pytest.raises(ValueError, match="the run .*: its model takes images of another shape than these 3×32×32 ones"):
        run.embed(np.zeros((2, 3, 32, 32), np.float32))
    assert run.embed(x[:0]).shape == (0, 512)


def test_attack_and_robustness_match_the_command_line(run):
    r = run.attack("CA+", queries=16, batch=16)
    assert r["attack"] == "CA+" and r["queries"] == 16
    cli = subprocess.run(
        [str(ROOT / "target/release/rdml"), "--quiet", "attack", "--model", run.path, "--attack", "CA+",
         "--queries", "16", "--batch", "16", "--json"],
        capture_output=True, text=True,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["scores"] == r["scores"]
    rec = run.robustness(queries=8, batch=8)
    t = rec["table"]
    assert 0.0 <= t["ers"] <= 100.0 and len(t["rows"]) == 10
    stored = json.loads((Path(run.path) / "robustness.json").read_text())
    assert stored["table"]["ers"] == t["ers"] and stored["queries"] == 8
    assert "Robustness" in (Path(run.path) / "report.html").read_text()


def test_presets_devices_and_report(run):
    p = rdml.presets()
    assert "quickstart" in p and "[model]" in p["quickstart"]
    d = rdml.devices()
    assert d[0].startswith("cpu") and d[-1].startswith("auto")
    # A build with a feature in the package's words (this build has no CUDA).
    assert "`maturin develop --release --features cuda` in python/" in d[-1], d[-1]
    assert rdml.open(run.path).report(grid=2).endswith("report.html")


def test_errors_are_python_exceptions_with_the_cli_messages(tmp_path, run):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        rdml.open(tmp_path / "nothing")
    with pytest.raises(ValueError, match="not an rdml run folder"):
        rdml.open(tmp_path)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        rdml.open(tmp_path / "a-file")
    with pytest.raises(ValueError, match="no-such-preset"):
        rdml.train("no-such-preset", tmp_path / "x", quiet=True)
    with pytest.raises(ValueError, match="epochz"):
        rdml.train("quickstart", tmp_path / "x", set={"train.epochz": 1}, quiet=True)
    with pytest.raises(ValueError, match=r"set= loss.margin: null has no TOML form"):
        rdml.train("quickstart", tmp_path / "x", set={"loss.margin": None}, quiet=True)
    with pytest.raises(ValueError, match="BOGUS"):
        run.attack("BOGUS")
    with pytest.raises(ValueError, match="labels"):
        rdml.metrics(np.zeros((3, 2)), [0, 1])
    with pytest.raises(ValueError, match="NaN"):
        rdml.metrics(np.full((3, 2), np.nan), [0, 1, 1])
    with pytest.raises(ValueError, match="at least 2"):
        rdml.metrics(np.zeros((1, 2)), [0])
    with pytest.raises(ValueError, match="recall_ks"):
        rdml.metrics(np.zeros((3, 2)), [0, 1, 1], recall_ks=())
    assert not (tmp_path / "x").exists() or not (tmp_path / "x" / "model.safetensors").exists()


def test_a_pytorch_checkpoint_imports_with_pytorchs_embeddings(tmp_path):
    import gzip

    fixtures = ROOT / "tests" / "fixtures" / "import"
    manifest = json.loads((fixtures / "manifest.json").read_text())
    case = next(c for c in manifest["cases"] if c["name"] == "robrank-rc2f2")
    ckpt = tmp_path / "model.ckpt"
    ckpt.write_bytes(gzip.decompress((fixtures / "robrank-rc2f2.ckpt.gz").read_bytes()))
    r = rdml.import_torch(ckpt, tmp_path / "run", arch="c2f2", quiet=True)
    assert r.import_record["layout"] == "robrank" and r.import_record["root"] == "state_dict"
    assert r.config["model"]["embedding_dim"] == 64
    pixels = np.frombuffer(gzip.decompress((fixtures / "gray28.u8.gz").read_bytes()), np.uint8)
    images = (pixels.astype(np.float32) / 255).reshape(case["shape"])
    want = np.array(case["embeddings"], np.float32)
    got = r.embed(images)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4
    # The same errors as the command line, as exceptions; nothing written.
    # Options named by their keywords (the command line says --embedding-dim, --overwrite).
    with pytest.raises(ValueError, match="not embedding_dim=32"):
        rdml.import_torch(ckpt, tmp_path / "bad", arch="c2f2", embedding_dim=32)
    with pytest.raises((ValueError, RuntimeError), match="pass overwrite=True to replace it"):
        rdml.import_torch(ckpt, tmp_path / "run", arch="c2f2")
    with pytest.raises(ValueError, match="key_map="):
        rdml.import_torch(ckpt, tmp_path / "bad", arch="c2f2", key_map=["nonsense"])
    # A dict of prefixes, read by the library: a prefix may hold "=", the new one must be a string.
    with pytest.raises(ValueError, match=r'key_map="head=": 1 is not a key prefix'):
        rdml.import_torch(ckpt, tmp_path / "bad", arch="c2f2", key_map={"head=": 1})
    with pytest.raises(ValueError, match="the prefix to replace is empty"):
        rdml.import_torch(ckpt, tmp_path / "bad", arch="c2f2", key_map={"": "x."})
    mapped = rdml.import_torch(ckpt, tmp_path / "mapped", arch="c2f2", key_map={"no.such.prefix=": ""}, quiet=True)
    assert np.array_equal(mapped.embed(images), got)
    with pytest.raises(FileNotFoundError, match="no such checkpoint file"):
        rdml.import_torch(tmp_path / "missing.pth", tmp_path / "bad", arch="c2f2")
    assert not (tmp_path / "bad").exists()


def _readme_session():
    text = (ROOT / "README.md").read_text()
    code = re.search(r"<!-- python-session -->\s*```python\n(.*?)```", text, re.S)
    out = re.search(r"<!-- python-output -->\s*```text\n(.*?)```", text, re.S)
    assert code and out, "README: the Python session and its output"
    return code.group(1), out.group(1)


def test_the_readme_session_prints_what_the_readme_shows(tmp_path):
    code, shown = _readme_session()
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    number = re.compile(r"-?\d+(\.\d+)?")
    got = [number.sub("N", l) for l in p.stdout.strip().splitlines()]
    want = [number.sub("N", l) for l in shown.strip().splitlines()]
    assert got == want, p.stdout


def test_ctrl_c_stops_a_long_call_between_batches(tmp_path):
    code = "import rdml; rdml.train('quickstart', 'r', epochs=4)"
    # A shell's background job (`cmd &`) inherits SIGINT ignored, and Python then installs no
    # handler: the child gets the default disposition back so that Ctrl-C reaches it.
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    p = subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    for line in p.stderr:
        if line.startswith("[epoch 1/4]"):
            break
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    assert p.wait(timeout=120) != 0
    assert "KeyboardInterrupt: interrupted" in err, err
    # Stopped inside the first epoch: a run to resume, not a finished one.
    assert not (tmp_path / "r" / "model.safetensors").exists()


def test_the_type_stubs_declare_what_the_extension_has():
    """`_rdml.pyi` (shipped with py.typed: what mypy and pyright show) declares every public name
    of the extension and nothing else, `run` and `Session`'s methods included."""
    import ast
    from rdml import _rdml

    stub = ast.parse((Path(rdml.__file__).parent / "_rdml.pyi").read_text())
    declared = {}
    for node in stub.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            declared[node.target.id] = node
    public = {n for n in dir(_rdml) if not n.startswith("_")} | {"__version__"}
    assert set(declared) == public, (set(declared) ^ public)
    assert "run" in declared
    for name, node in declared.items():
        if isinstance(node, ast.ClassDef):
            methods = {m.name for m in node.body if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")}
            assert all(hasattr(getattr(_rdml, name), m) for m in methods), (name, methods)


def test_numpy_input_needs_no_torch(run):
    """The package depends on NumPy alone: a run embeds, attacks and scores NumPy images, and
    rdml.metrics reads NumPy embeddings, with torch impossible to import."""
    code = f"""
import sys
sys.modules["torch"] = None  # `import torch` now raises ImportError, as without it installed
import numpy as np
import rdml
r = rdml.open({str(run.path)!r}, quiet=True)
x = np.random.default_rng(0).random((4, 1, 28, 28), dtype=np.float32)
e = r.embed(x)
assert e.shape == (4, 512), e.shape
assert rdml.embed(r, x).shape == (4, 512)
assert rdml.metrics(e, [0, 0, 1, 1], recall_ks=(1,), nmi=False)["queries"] == 4
assert r.attack("ES", queries=2, steps=1)["queries"] == 2
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_the_packages_rooms_import_no_name_from_its_face():
    """`rdml/__init__.py` is the face (imports, `__all__`, `RdmlWarning`): no module of the
    package imports a name from it (only its sibling modules, `from . import _wire`), and the
    face stays short."""
    import ast

    here = Path(rdml.__file__).parent
    modules = {p.stem for p in here.glob("*.py")} | {"_rdml"}
    for path in sorted(here.glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                names = {a.name for a in node.names}
                assert names <= modules, (path.name, names - modules)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "rdml":
                raise AssertionError(f"{path.name} imports {node.module}")
    assert len((here / "__init__.py").read_text().splitlines()) <= 150
