"""rdml's attacks over a model held outside rdml (a PyTorch module, "Score any model where it
lives"): the same numbers as the imported network scored natively, any architecture, and an
error for every wrong input or model, never a number."""

import gzip
import inspect
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import rdml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PERCENT = ("CA+", "CA-", "QA+", "QA-", "ES:R", "LTM", "GTM", "GTT")


def fashion(n, offset=0):
    """The first `n` Fashion-MNIST test images shipped in rdml, in [0, 1], and their labels."""
    d = ROOT / "data" / "fashion-mnist"
    px = np.frombuffer(gzip.decompress((d / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    lb = np.frombuffer(gzip.decompress((d / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    sl = slice(offset, offset + n)
    return px.reshape(-1, 1, 28, 28)[sl].astype(np.float32) / 255, lb[sl].astype(np.int64)


class L2(nn.Module):
    """An embedding network as rdml imports it: `backbone`, inputs normalised inside, L2 rows."""

    def __init__(self, backbone, mean=None, std=None):
        super().__init__()
        self.backbone = backbone
        self.norm = None if mean is None else (torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x):
        if self.norm is not None:
            x = (x - self.norm[0]) / self.norm[1]
        return F.normalize(self.backbone(x), dim=1)


def c2f2(dim=64):
    """robrank's rc2f2 (robrank/models/template_rank.py)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, dim))


def columns(record):
    return {r["column"]: r["raw"] for r in record["table"]["rows"]}


def assert_same_suite(a, b, queries):
    """Every column within two queries' worth, ERS within 1.5."""
    ca, cb = columns(a), columns(b)
    assert set(ca) == set(cb) and len(ca) == 10
    for k in PERCENT:
        assert abs(ca[k] - cb[k]) <= 200 / queries + 1e-9, (k, ca[k], cb[k])
    assert abs(ca["TMA"] - cb["TMA"]) <= 2 / queries and abs(ca["ES:D"] - cb["ES:D"]) <= 2 / queries
    assert abs(a["table"]["ers"] - b["table"]["ers"]) <= 1.5


def test_a_pytorch_c2f2_scores_as_its_import(tmp_path):
    torch.manual_seed(0)
    model = L2(c2f2())  # in train mode, one submodule in eval mode: both come back as they were
    model.backbone[0].eval()
    torch.save(model.state_dict(), tmp_path / "c2f2.pth")
    run = rdml.import_torch(tmp_path / "c2f2.pth", tmp_path / "run", arch="c2f2", quiet=True)
    x, y = fashion(300)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert np.abs(rdml.embed(model, x, batch=64) - want).max() < 1e-5
    assert np.abs(rdml.embed(run, x) - want).max() < 1e-5
    a = rdml.robustness(model, x, y, queries=32, quiet=True)
    b = rdml.robustness(run, x, y, queries=32, quiet=True)
    assert_same_suite(a, b, 32)
    # The suite moved the ranks (robrank's rob28 on an untrained model: near-total success).
    c = columns(a)
    assert c["CA+"] < 10 and c["CA-"] > 90 and c["QA+"] < 10 and c["QA-"] > 90
    assert a["queries"] == 32 and a["profile"] == "rob28" and a["method"] == "white-box"
    # One attack: Run.attack's dict.
    one = rdml.attack(model, x, y, "QA+", queries=16, quiet=True)
    assert one["attack"] == "QA+" and one["queries"] == 16 and set(one["scores"]) == {"QA+", "ARS"}
    assert model.training and not model.backbone[0].training and model.backbone[3].training
    assert all(p.requires_grad for p in model.parameters())
    # The run's record names it and its weights.
    assert b["model"] == str(tmp_path / "run") and b["model_digest"].startswith("crc32:") and a["model"] == ""


def test_per_query_values_are_each_items_own_and_average_to_the_scores():
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = fashion(120)
    plain = rdml.attack(model, x, y, "NN", queries=20, steps=3, quiet=True)
    kept = rdml.attack(model, x, y, "NN", queries=20, steps=3, per_query=True, quiet=True)
    assert "per_query" not in plain and kept["scores"] == plain["scores"]
    p = kept["per_query"]
    assert p["item"] == list(range(20)) and set(p["values"]) == set(kept["scores"])
    for name, score in kept["scores"].items():
        v = [u for u in p["values"][name] if u is not None]
        assert len(p["values"][name]) == 20 and abs(np.mean(v) - score) < 1e-9, name
    assert set(p["values"]["recall@1"]) <= {0.0, 100.0}
    s = rdml.robustness(model, x, y, queries=8, steps=2, per_query=True, quiet=True)
    assert [r["per_query"]["item"] for r in s["table"]["results"]] == [list(range(8))] * 9
    assert "per_query" not in rdml.robustness(model, x, y, queries=8, steps=2, quiet=True)["table"]["results"][0]


def test_a_torchvision_resnet18_with_batch_norm_statistics_scores_as_its_import(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(1)
    net = torchvision.models.resnet18(weights=None, num_classes=32)
    x, y = fashion(160)
    x = np.ascontiguousarray(np.repeat(np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))), 3, axis=1))
    imagenet = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    model = L2(net, *imagenet)
    # Running statistics of these images (momentum 1): every batch norm normalises real values.
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(torch.from_numpy(x))
    model.eval()
    torch.save(net.state_dict(), tmp_path / "r18.pth")
    run = rdml.import_torch(tmp_path / "r18.pth", tmp_path / "run", arch="resnet18", quiet=True)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert np.abs(rdml.embed(model, x) - want).max() < 1e-5
    assert np.abs(rdml.embed(run, x) - want).max() < 1e-5
    a = rdml.robustness(model, x, y, queries=16, quiet=True)
    b = rdml.robustness(run, x, y, queries=16, quiet=True)
    assert_same_suite(a, b, 16)
    assert model.training is False and all(p.requires_grad for p in model.parameters())


class TinyViT(nn.Module):
    """A vision transformer: 7×7 patches, two encoder layers, a class token."""

    def __init__(self, dim=32):
        super().__init__()
        self.patch = nn.Conv2d(1, dim, 7, stride=7)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(dim, 24)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(len(t), -1, -1), t], 1) + self.pos
        return F.normalize(self.head(self.encoder(t)[:, 0]), dim=1)


def mobile():
    """Depthwise convolutions, GroupNorm, SiLU and GELU: nothing `rdml import` reads."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Conv2d(16, 32, 1), nn.GroupNorm(8, 32), nn.GELU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32), nn.Conv2d(32, 32, 1), nn.SiLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, 24))


@pytest.mark.parametrize("make", [TinyViT, lambda: L2(mobile())], ids=["vit", "depthwise-groupnorm"])
def test_any_architecture_is_scored(make):
    torch.manual_seed(2)
    model = make()
    x, y = fashion(200)
    r = rdml.robustness(model, x, y, queries=24, quiet=True)
    c = columns(r)
    assert set(c) == {"CA+", "CA-", "QA+", "QA-", "TMA", "ES:D", "ES:R", "LTM", "GTM", "GTT"}
    assert all(np.isfinite(v) for v in c.values())
    # Ranks moved far from where they start (a random candidate ~50 %, a top-1 % one ~0.5 %):
    # candidates raised to the top and queries dragged off their neighbours, as on rdml's models.
    assert c["CA+"] < 25 and c["CA-"] > 75 and c["QA+"] < 25 and c["QA-"] > 75
    assert 0 <= r["table"]["ers"] <= 100


def test_a_dataset_of_pairs_and_torch_tensors_give_the_arrays_result():
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = fashion(60)
    a = rdml.attack(model, x, y, "CA+", queries=8, quiet=True)
    ds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    b = rdml.attack(model, ds, None, "CA+", queries=8, quiet=True)
    c = rdml.attack(model, torch.from_numpy(x).to(torch.bfloat16).float(), torch.from_numpy(y), "CA+", queries=8, quiet=True)
    assert a["scores"] == b["scores"]
    assert c["queries"] == 8
    assert np.array_equal(rdml.embed(model, ds), rdml.embed(model, x))


def test_the_keywords_defaults_are_the_librarys():
    d = rdml._wire.run("defaults", {})[0]
    profile, method, batch, seed, repeats, queries, grid = (d[k] for k in ("profile", "method", "batch", "seed",
                                                                          "repeats", "queries", "grid"))
    for f in (rdml.robustness, rdml.attack):
        p = inspect.signature(f).parameters
        assert (p["profile"].default, p["method"].default, p["batch"].default, p["seed"].default,
                p["repeats"].default, p["queries"].default) == (profile, method, batch, seed, repeats, queries)
    # rdml.Attack's constructor takes the scoring keywords but queries (its call's: None, every item).
    p = inspect.signature(rdml.Attack).parameters
    assert (p["profile"].default, p["method"].default, p["batch"].default, p["seed"].default) == (
        profile, method, batch, seed)
    assert inspect.signature(rdml.Attack.__call__).parameters["queries"].default is None
    # A run folder's methods: the same defaults (embed_split's attack included).
    for f in (rdml.Run.robustness, rdml.Run.attack, rdml.Run.embed_split):
        p = inspect.signature(f).parameters
        assert (p["profile"].default, p["method"].default, p["batch"].default, p["seed"].default,
                p["queries"].default) == (profile, method, batch, seed, queries), f
    assert inspect.signature(rdml.Run.report).parameters["grid"].default == grid
    for f in (rdml.certify, rdml.Run.certify):
        p = inspect.signature(f).parameters
        for k, v in d["certify"].items():
            got = list(p[k].default) if k == "radii" else p[k].default
            assert got == (v if v is None or isinstance(v, str) else pytest.approx(v)), (f, k)


def test_out_writes_the_record_and_report_and_replaces_only_its_own(tmp_path):
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = fashion(40)
    out = tmp_path / "scored"
    r = rdml.robustness(model, x, y, queries=4, steps=2, out=out, quiet=True)
    rec = json.loads((out / "robustness.json").read_text())
    assert rec["table"]["ers"] == r["table"]["ers"] and rec["pgd"]["steps"] == 2
    # The record names the model by a digest of its parameters and buffers, and the queries used.
    assert r["model_digest"] == rdml._torch.module_digest(model) and r["model_digest"].startswith("sha256:")
    assert r["queries"] == 4 == r["queries_used"]
    assert "ERS" in (out / "report.html").read_text()
    again = rdml.robustness(model, x, y, queries=4, steps=3, out=out, quiet=True)
    assert json.loads((out / "robustness.json").read_text())["pgd"]["steps"] == 3 == again["pgd"]["steps"]
    # A file rdml did not write is never replaced; an rdml run folder is not an output.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.html").write_text("my notes")
    with pytest.raises(ValueError, match="rdml did not write it"):
        rdml.robustness(model, x, y, queries=4, steps=2, out=mine, quiet=True)
    assert (mine / "report.html").read_text() == "my notes" and not (mine / "robustness.json").exists()
    # Edited since rdml wrote it: kept.
    (out / "report.html").write_text("edited")
    with pytest.raises(ValueError, match="rdml did not write it"):
        rdml.robustness(model, x, y, queries=4, steps=2, out=out, quiet=True)
    assert (out / "report.html").read_text() == "edited"
    # A refused call leaves no folder behind.
    with pytest.raises(ValueError, match="labels"):
        rdml.robustness(model, x, y[:3], queries=4, out=tmp_path / "never", quiet=True)
    assert not (tmp_path / "never").exists()
    # Without out, nothing is written.
    before = sorted(p.name for p in tmp_path.iterdir())
    rdml.robustness(model, x, y, queries=4, steps=1, quiet=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


class Boom(Exception):
    pass


def test_wrong_models_and_inputs_are_errors_naming_the_keyword():
    torch.manual_seed(0)
    good = L2(c2f2(16))
    x, y = fashion(20)
    attack = lambda m, xx=x, yy=y, **kw: rdml.attack(m, xx, yy, "CA+", queries=4, steps=2, quiet=True, **kw)
    with pytest.raises(ValueError, match=r"model: returned a tensor of shape \[\d+, 16, 1\]"):
        attack(lambda t: good(t).unsqueeze(-1))
    with pytest.raises(ValueError, match="model: returned a non-finite embedding value"):
        attack(lambda t: good(t) * float("nan"))
    with pytest.raises(TypeError, match="model: returned a list"):
        attack(lambda t: [good(t)])
    numpy_model = lambda t: torch.from_numpy(good(t).detach().numpy())
    with pytest.raises(ValueError, match='not differentiable.*use method "nes"'):
        attack(numpy_model)
    nes = attack(numpy_model, method="nes:pop=4")
    assert nes["method"] == "nes:pop=4" and nes["scores"]["model_queries"] > 0
    with pytest.raises(ValueError, match='method = "white-box" needs the model.s gradient.*nes'):
        attack(good, differentiable=False)
    with pytest.raises(ValueError, match=r"images: value 1\.12\d* at image 0 lies outside \[0, 1\]"):
        attack(good, xx=x * 2)
    with pytest.raises(ValueError, match="images: uint8 values; expected floats in"):
        attack(good, xx=(x * 255).astype(np.uint8))
    with pytest.raises(ValueError, match="labels: 19 labels for 20 images"):
        attack(good, yy=y[:19])
    with pytest.raises(ValueError, match="eps=2 is an L∞ radius"):
        attack(good, eps=2.0)

    def raising(t):
        raise Boom("inside the model")

    good.train()

    with pytest.raises(Boom, match="inside the model") as e:
        attack(raising)
    assert any(f.name == "raising" for f in e.traceback)
    # A module that raises: its mode and parameters restored all the same.
    class Raising(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = good

        def forward(self, t):
            raise Boom("inside the module")

    bad = Raising().train()
    with pytest.raises(Boom, match="inside the module"):
        attack(bad)
    assert bad.training and good.training and all(p.requires_grad for p in bad.parameters())


def test_ctrl_c_stops_a_scoring_call_between_batches(tmp_path):
    code = (
        "import numpy as np, torch, rdml, sys\n"
        "net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 8))\n"
        "def slow(x):\n"
        "    import time; time.sleep(0.05); return net(x)\n"
        "x = np.random.default_rng(0).random((400, 1, 28, 28), dtype=np.float32)\n"
        "print('start', flush=True)\n"
        "rdml.robustness(slow, x, np.arange(400) % 4, batch=8, quiet=True)\n"
    )
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    assert p.stdout.readline().strip() == "start"
    import time

    time.sleep(2)
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    assert p.wait(timeout=60) != 0
    assert "KeyboardInterrupt" in err, err


def test_import_refuses_what_it_cannot_read_and_names_the_data_it_scores_on(tmp_path):
    vit = {"cls_token": torch.zeros(1, 1, 8), "pos_embed": torch.zeros(1, 5, 8),
           "blocks.0.attn.qkv.weight": torch.zeros(24, 8), "head.weight": torch.zeros(4, 8)}
    efficientnet = {"features.1.0.block.0.0.weight": torch.zeros(8, 1, 3, 3), "classifier.1.weight": torch.zeros(4, 8)}
    for name, sd, family in [("vit", vit, "vision transformer"), ("eff", efficientnet, "EfficientNet")]:
        torch.save(sd, tmp_path / f"{name}.pth")
        for allow in (False, True):
            with pytest.raises(ValueError, match=f"not a ResNet-18 that rdml can read: the file holds an? {family}.*rdml.robustness"):
                rdml.import_torch(tmp_path / f"{name}.pth", tmp_path / name, arch="resnet18", embedding_dim=8,
                                  allow_missing=allow, allow_unused=allow)
        assert not (tmp_path / name).exists()
    # Weights cast to integers are said as such, not as a model without its layers (issue 52).
    torch.manual_seed(0)
    ints = {k: v.to(torch.int64) for k, v in L2(c2f2(16)).state_dict().items()}
    torch.save(ints, tmp_path / "ints.pth")
    with pytest.raises(ValueError, match=r"tensor .* holds int64 values: a model's weights are floating point"):
        rdml.import_torch(tmp_path / "ints.pth", tmp_path / "ints", arch="c2f2", quiet=True)
    # A ResNet's stem alone: --allow-missing would leave almost all of it random.
    torchvision = pytest.importorskip("torchvision")
    r = torchvision.models.resnet18(weights=None, num_classes=8).state_dict()
    stem = {k: v for k, v in r.items() if k.startswith(("conv1.", "bn1.", "fc."))}
    torch.save(stem, tmp_path / "stem.pth")
    with pytest.raises(ValueError, match=r"it fills \d+ of the \d+ parameters of rdml's ResNet-18"):
        rdml.import_torch(tmp_path / "stem.pth", tmp_path / "stem", arch="resnet18", allow_missing=True)
    # Imported without a config: scoring says which data it runs on.
    torch.manual_seed(0)
    torch.save(L2(c2f2(16)).state_dict(), tmp_path / "c2f2.pth")
    run = rdml.import_torch(tmp_path / "c2f2.pth", tmp_path / "run", arch="c2f2", quiet=True)
    said = "imported without a config, so it is scored on its default config's data: fashion-mnist-embedded.*data="
    with pytest.warns(rdml.RdmlWarning, match=said):
        run.attack("CA+", queries=2, steps=1)


def test_the_readme_pytorch_session_prints_what_the_readme_shows(tmp_path):
    import re

    text = (ROOT / "README.md").read_text()
    code = re.search(r"<!-- torch-session -->\s*```python\n(.*?)```", text, re.S)
    shown = re.search(r"<!-- torch-output -->\s*```text\n(.*?)```", text, re.S)
    assert code and shown, "README: the PyTorch session and its output"
    (tmp_path / "data").symlink_to(ROOT / "data")
    p = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    number = re.compile(r"-?\d+(\.\d+)?")
    got = [number.sub("N", line) for line in p.stdout.strip().splitlines()]
    assert got == [number.sub("N", line) for line in shown.group(1).strip().splitlines()], p.stdout
    assert (tmp_path / "scored" / "robustness.json").is_file() and (tmp_path / "scored" / "report.html").is_file()


def test_a_transfer_attack_makes_its_examples_on_the_surrogate():
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = fashion(80)
    white = rdml.attack(model, x, y, "CA+", queries=8, steps=4, quiet=True)
    # From a model to itself: the white-box attack.
    assert rdml.attack(model, x, y, "CA+", queries=8, steps=4, surrogate=model, quiet=True)["scores"] == white["scores"]
    # A model that can only be queried, attacked through a differentiable surrogate.
    black = lambda t: torch.from_numpy(model(t).detach().numpy())
    r = rdml.robustness(black, x, y, queries=8, steps=4, surrogate=model, differentiable=False, quiet=True)
    assert r["surrogate"] == "(a model outside rdml)" and len(r["table"]["rows"]) == 10
    assert columns(r)["CA+"] < 25
    with pytest.raises(ValueError, match="or a differentiable surrogate="):
        rdml.attack(black, x, y, "CA+", differentiable=False, quiet=True)


def test_metrics_take_torch_tensors_as_pytorch_users_hold_them():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((50, 8)).astype(np.float32)
    y = rng.integers(0, 5, 50)
    want = rdml.metrics(e, y, nmi=False)
    t = torch.from_numpy(e).requires_grad_(True)
    assert rdml.metrics(t, torch.from_numpy(y), nmi=False)["recall@1"] == want["recall@1"]
    half = rdml.metrics(t.to(torch.bfloat16), y, nmi=False)
    assert abs(half["recall@1"] - want["recall@1"]) <= 0.1


def test_metrics_traps_are_closed():
    rng = np.random.default_rng(1)
    e = rng.standard_normal((60, 8)).astype(np.float32)
    y = rng.integers(0, 6, 60)
    plain = rdml.metrics(e, y, nmi=False)
    # The queries passed again as the gallery, in any order: leave-one-out, with a warning, not R@1 = 1.
    perm = rng.permutation(60)
    for g, gy in [(e.copy(), y.copy()), (e[perm], y[perm])]:
        with pytest.warns(rdml.RdmlWarning, match="the gallery is the queries themselves.*leave the gallery out"):
            same = rdml.metrics(e, y, gallery=g, gallery_labels=gy, nmi=False)
        assert same["recall@1"] == plain["recall@1"] < 1.0
    # A gallery holding some queries' own items among others: each left out of its own list only.
    other = rng.standard_normal((30, 8)).astype(np.float32)
    g, gy = np.concatenate([other, e[perm[:25]]]), np.concatenate([rng.integers(0, 6, 30), y[perm[:25]]])
    with pytest.warns(rdml.RdmlWarning, match="the gallery holds 25 of the 60 queries' own items"):
        part = rdml.metrics(e, y, gallery=g, gallery_labels=gy, recall_ks=(1,), nmi=False, pi_ratio=False)
    d = ((e[:, None, :] - g[None, :, :]) ** 2).sum(-1)
    for j, i in enumerate(perm[:25]):
        d[i, 30 + j] = np.inf
    assert part["recall@1"] == pytest.approx(np.mean(gy[d.argmin(1)] == y))
    # No query has another item of its class: an error, not zeros and NMI 1.
    with pytest.raises(ValueError, match="no query has another item of its class"):
        rdml.metrics(e[:12], np.arange(12), recall_ks=(1,))
    # Given embeddings took no time to embed: no embed_seconds; the metrics' own time is there.
    assert "embed_seconds" not in plain and plain["metric_seconds"] > 0


def test_a_gallery_ranks_the_queries_among_it_alone():
    torch.manual_seed(0)
    model = L2(c2f2(32))
    q, qy = fashion(40)
    g, gy = fashion(160, offset=40)
    kw = dict(gallery=g, gallery_labels=gy, quiet=True)
    # The clean Recall@1 is the queries' among the gallery, nothing left out: rdml.metrics' own.
    es = rdml.attack(model, q, qy, "ES", queries=40, **kw)
    m = rdml.metrics(rdml.embed(model, q), qy, gallery=rdml.embed(model, g), gallery_labels=gy)
    assert es["scores"]["recall@1:clean"] == pytest.approx(100 * m["recall@1"])
    assert es["scores"]["ES:R"] < es["scores"]["recall@1:clean"] - 20
    # CA± moves gallery images (100 of them here), the other attacks the queries (all 40).
    assert rdml.attack(model, q, qy, "CA+", queries=100, **kw)["queries"] == 100
    assert rdml.attack(model, q, qy, "QA+", queries=100, **kw)["queries"] == 40
    rec = rdml.robustness(model, q, qy, queries=40, **kw)
    c = columns(rec)
    assert rec["gallery"] == 160 and len(c) == 10 and all(np.isfinite(v) for v in c.values())
    assert c["CA+"] < 10 and c["CA-"] > 90 and c["QA+"] < 10 and c["QA-"] > 90
    # Ranks are percentiles among the 160 gallery images: a query's list holds no copy of itself.
    one = rdml.attack(model, q[:1], qy[:1], "QA-", queries=1, steps=2, **kw)
    assert (one["scores"]["QA-"] * 160 / 100) == pytest.approx(round(one["scores"]["QA-"] * 160 / 100))
    # The queries passed as their own gallery, in any order: leave-one-out, with a warning, as with
    # no gallery; a gallery holding some of them leaves each out of its own list (clean Recall@1 as
    # rdml.metrics gives it, whose own test computes it by hand).
    alone = rdml.attack(model, q, qy, "ES", queries=40, quiet=True)["scores"]
    perm = np.random.default_rng(0).permutation(40)
    for same_g, same_y in [(q, qy), (q[perm], qy[perm])]:
        with pytest.warns(rdml.RdmlWarning, match="the gallery is the queries themselves"):
            same = rdml.attack(model, q, qy, "ES", queries=40, gallery=same_g, gallery_labels=same_y, quiet=True)
        assert same["scores"] == alone
    mixed, mixed_y = np.concatenate([g, q[perm[:10]]]), np.concatenate([gy, qy[perm[:10]]])
    with pytest.warns(rdml.RdmlWarning, match="the gallery holds 10 of the 40 queries' own items"):
        part = rdml.attack(model, q, qy, "ES", queries=40, gallery=mixed, gallery_labels=mixed_y, quiet=True)
    eq, eg = (np.asarray(rdml.embed(model, x)) for x in (q, mixed))
    d = ((eq[:, None, :] - eg[None, :, :]) ** 2).sum(-1)
    d[perm[:10], 160 + np.arange(10)] = np.inf
    by_hand = np.mean(mixed_y[d.argmin(1)] == qy)
    assert part["scores"]["recall@1:clean"] == pytest.approx(100 * by_hand) and by_hand < 0.99
    for bad, match in [
        (dict(gallery_labels=gy), "gallery_labels: given without gallery"),
        (dict(gallery=np.repeat(g, 3, axis=1), gallery_labels=gy), r"gallery: images of shape \[3, 28, 28\]"),
        (dict(gallery=g, gallery_labels=gy[:3]), "gallery_labels: 3 labels for 160 images"),
        (dict(gallery=g * 2, gallery_labels=gy), r"gallery: value .* outside \[0, 1\]"),
        (dict(gallery=g, gallery_labels=gy + 100), "gallery_labels: no query's class is in the gallery"),
        (dict(gallery=g, gallery_labels=gy, robrank_compat=True), "robrank_compat: robrank ranks the test set"),
        (dict(gallery=g.astype(np.uint8), gallery_labels=gy), "gallery: uint8 values"),
    ]:
        with pytest.raises(ValueError, match=match):
            rdml.robustness(model, q, qy, queries=4, quiet=True, **bad)


def test_certify_any_model_a_function_and_a_run_alike(tmp_path):
    torch.manual_seed(0)
    model = L2(c2f2())
    torch.save(model.state_dict(), tmp_path / "c2f2.pth")
    run = rdml.import_torch(tmp_path / "c2f2.pth", tmp_path / "run", arch="c2f2", quiet=True)
    x, y = fashion(200)
    kw = dict(sigma=0.12, radii=(0, 0.1, 0.25), samples=200, select=20, queries=12, quiet=True)
    a = rdml.certify(model, x, y, per_query=True, **kw)
    assert list(a["certified"]) == [0, 0.1, 0.25] and a["queries_used"] == 12 and a["model"] == ""
    assert (a["sigma"], a["samples"], a["select"], a["alpha"]) == (pytest.approx(0.12), 200, 20, 0.001)
    rows = a["per_query"]
    assert len(rows) == 12 - a["lone"] and a["model_digest"]
    for r, v in a["certified"].items():
        want = 100 * np.mean([q["selected"] == q["label"] and q["radius"] is not None and q["radius"] >= r
                              for q in rows])
        assert abs(v - want) < 1e-9, r
    assert a["certified"][0] >= a["certified"][0.1] >= a["certified"][0.25]
    assert abs(a["abstained"] - 100 * np.mean([q["radius"] is None for q in rows])) < 1e-9
    # Smoothing asks for embeddings alone: a function that gives no gradient, and the imported run
    # (rdml's own network), certify alike: the function's copies are drawn on its side as the
    # module's are (the same noise; their embeddings agree to ~1e-6, a tie may flip one); the run's
    # are drawn by rdml from another generator, the same distribution, so within a query.
    f = rdml.certify(lambda t: model(t).detach(), x, y, **kw)
    b = rdml.certify(run, x, y, **kw)
    for other in (f, b):
        for r in kw["radii"]:
            assert abs(other["certified"][r] - a["certified"][r]) <= 100 / 12 + 1e-9, r
    # The run folder's own test split: the record kept beside robustness.json.
    kept = run.certify(**{k: v for k, v in kw.items() if k != "quiet"})
    stored = json.loads((tmp_path / "run" / "certify.json").read_text())["certified"]
    assert list(stored) == ["0", "0.1", "0.25"] and list(stored.values()) == list(kept["certified"].values())
    # The curve's radii give the same certified Recall@1 at every radius, and the report draws it.
    radii = kept["certified_radii"]
    assert radii == sorted(radii, reverse=True)
    for r, v in kept["certified"].items():
        assert abs(100 * sum(x >= r for x in radii) / (kept["queries_used"] - kept["lone"]) - v) < 1e-9, r
    assert "Certified Recall@1 over the ℓ2 radius" in (tmp_path / "run" / "report.html").read_text()
    for bad, match in [(dict(sigma=-1.0), "sigma"), (dict(radii=0.25), "radii"), (dict(alpha=0.7), "alpha"),
                       (dict(delta=0.1), "delta"), (dict(method="median"), "method")]:
        with pytest.raises(ValueError, match=match):
            rdml.certify(model, x, y, **{**kw, **bad})


def test_certify_by_centre_smoothing():
    torch.manual_seed(0)
    model = L2(c2f2())
    x, y = fashion(200)
    kw = dict(sigma=0.12, radii=(0, 0.02, 0.05), samples=300, select=4000, queries=3, quiet=True)
    c = rdml.certify(model, x, y, method="center", per_query=True, **kw)
    assert (c["method"], c["delta"], c["select"], c["samples"]) == ("center", pytest.approx(0.05), 4000, 300)
    rows = c["per_query"]
    assert len(rows) == 3 - c["lone"]
    for r, v in c["certified"].items():
        want = 100 * np.mean([q["selected"] == q["label"] and q["radius"] is not None and q["radius"] >= r
                              for q in rows])
        assert abs(v - want) < 1e-9, r
    assert abs(c["abstained"] - 100 * np.mean([q["abstained"] for q in rows])) < 1e-9
    assert abs(c["clean"] - 100 * np.mean([q["majority"] == q["label"] for q in rows])) < 1e-9
    # The centre's share of the copies: at least 1/2 − Δ where the query did not abstain.
    assert all(q["p_lower"] >= 0.45 for q in rows if not q["abstained"])
    # Each row's margin to the nearest other label and the least bound: a radius only below it.
    for q in rows:
        assert q["margin"] > 0 and q["least_bound"] > 0, q
        assert q["radius"] is None or q["least_bound"] < q["margin"], q
    with pytest.raises(ValueError, match="delta"):
        rdml.certify(model, x, y, method="center", delta=0.7, **kw)
