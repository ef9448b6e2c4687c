"""rdml's defenses and losses in a PyTorch loop ("Harden any model where it trains"): one step of
`rdml.Defense` / `rdml.Loss` on a PyTorch C2F2 gives rdml's own trainer's loss and parameter
gradients on the same weights (imported), batch and seed; the model's state is the user's; every
wrong input is an error naming its keyword."""

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import rdml  # noqa: E402
from rdml._wire import run as _run  # noqa: E402

from test_model import L2, c2f2, fashion  # noqa: E402

# rdml's C2F2 parameters by the PyTorch Sequential's index (robrank's layout).
LAYERS = {"conv1": "0", "conv2": "3", "fc1": "7", "fc2": "9"}
DIM = 32


def spc2(pairs=8, offset=0, per=2):
    """An SPC-2 batch: `pairs` classes, two images each (or `per`), from the shipped test split."""
    x, y = fashion(600, offset)
    idx = []
    for c in range(pairs):
        idx += list(np.flatnonzero(y == c)[:per])
    return x[idx], y[idx]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A PyTorch C2F2 (L2-normalised) and its import as an rdml run, the same weights."""
    d = tmp_path_factory.mktemp("c2f2")
    torch.manual_seed(0)
    model = L2(c2f2(DIM))
    torch.save(model.state_dict(), d / "c2f2.pth")
    run = rdml.import_torch(d / "c2f2.pth", d / "run", arch="c2f2", quiet=True)
    return model, run


def reference(run, x, y, *, defense=None, loss=None, seed=0, epoch=0, epochs=1):
    """rdml's own trainer on one batch: its loss and each parameter's gradient in PyTorch's
    names and layout."""
    request = dict(run=str(run.path), defense=defense, loss=loss, seed=seed, epoch=epoch, epochs=epochs,
                   images=dict(shape=list(x.shape), labels=[int(v) for v in y]))
    answer, arrays = _run("trainer_step", request, [np.ascontiguousarray(x, "<f4").tobytes()])
    grads = {}
    for (path, shape), raw in zip(answer["parameters"], arrays):
        layer, name = path.split(".")[-2:]
        g = np.frombuffer(raw, "<f4").reshape(shape)
        grads[f"backbone.{LAYERS[layer]}.{name}"] = g.T if g.ndim == 2 else g
    return answer["loss"], grads, answer["beta_grad"]


def pytorch_step(model, fn):
    """`fn()`'s loss and each parameter's gradient, from fresh gradients."""
    model.zero_grad(set_to_none=True)
    loss = fn()
    loss.backward()
    return float(loss.detach()), {k: p.grad.numpy().copy() for k, p in model.named_parameters()}


def worst(torch_grads, rdml_grads):
    """The largest gradient difference of any parameter, relative to that parameter's largest
    gradient."""
    assert set(torch_grads) == set(rdml_grads)
    rel = 0.0
    for k, g in torch_grads.items():
        r = rdml_grads[k]
        scale = max(np.abs(r).max(), 1e-12)
        rel = max(rel, float(np.abs(g - r).max() / scale))
    return rel


def preset_tables(name):
    return _run("preset_tables", dict(name=name))[0]


DEFENSES = ["fashion-c2f2-madry", "fashion-c2f2-est", "fashion-c2f2-act", "fashion-c2f2-hm-lga-ics",
            "fashion-c2f2-ca-tride", "fashion-c2f2-positive-perturbation", "fashion-c2f2-mdprop",
            "fashion-c2f2-advprop"]


@pytest.mark.parametrize("preset", DEFENSES)
def test_a_defense_step_in_a_pytorch_loop_is_rdml_trainers_step(imported, preset):
    """At most 8 PGD steps (robrank's `override_pgditer_8`): sign steps amplify the last bits in
    which PyTorch's convolutions and rdml's differ, so that after 16–32 steps of ε = 77/255 the
    two inner maximisations of ACT, Madry and EST reach other (equally adversarial) images. rdml
    against itself does the same with its weights one ulp apart (ACT, 32 steps: loss 5.5e-4,
    gradients 0.4 apart). Asserted at 1e-5 (loss) and 1e-4 (gradients); measured up to 8 steps:
    7e-7 and 6e-6."""
    model, run = imported
    t = preset_tables(preset)
    t["defense"]["steps"] = min(t["defense"]["steps"], 8)
    x, y = spc2()
    epoch, epochs = (1, 2) if t["defense"]["kind"] == "ca-tride" else (0, 1)
    want, want_grads, _ = reference(run, x, y, defense=t["defense"], loss=t["loss"], seed=3, epoch=epoch, epochs=epochs)
    table = dict(t["defense"])
    defense = rdml.Defense(table.pop("kind"), loss=rdml.Loss(**t["loss"]), seed=3, **table)
    defense.start_epoch(epoch, epochs)
    got, grads = pytorch_step(model, lambda: defense(model, torch.from_numpy(x), torch.from_numpy(y)))
    assert abs(got - want) <= 1e-5 * abs(want) + 1e-7, (preset, got, want)
    assert worst(grads, want_grads) <= 1e-4, (preset, worst(grads, want_grads))
    assert defense.last["steps_done"] == 1 and np.isfinite(defense.last["diagnostics"]["collapseness"])


LOSSES = {
    "triplet-semihard": dict(kind="triplet", miner="semihard"),
    "triplet-distance": dict(kind="triplet", miner="distance", distance="normalized-euclidean"),
    "contrastive": dict(kind="contrastive", miner="distance"),
    "margin": dict(kind="margin"),
    "multi-similarity": dict(kind="multi-similarity"),
    "lifted": dict(kind="lifted"),
    "npair": dict(kind="npair"),
}
DRO = ["fashion-c2f2-dro-kl", "fashion-c2f2-dro-kl-g", "fashion-c2f2-dro-ls", "fashion-c2f2-dro-ms",
       "fashion-c2f2-dro-topk", "fashion-c2f2-dro-topk-pn"]


@pytest.mark.parametrize("name", list(LOSSES) + DRO)
def test_a_loss_in_a_pytorch_loop_is_rdml_trainers_loss(imported, name):
    """Asserted at 1e-5 (loss) and 1e-4 (gradients); measured: 1e-7 and 5e-6. (On a batch where two values of a max-pooling
    window of conv1 lie less than 1e-6 apart, PyTorch's convolution and rdml's may round them
    into another order, and the window's gradient goes to the other pixel: the images 300–600
    of the test split hold such windows, and there the convolutions' gradients differ by
    1e-4–4e-3 of their norm while the loss still agrees to 1e-6.)"""
    model, run = imported
    table = preset_tables(name)["loss"] if name in DRO else LOSSES[name]
    x, y = spc2(10, per=3)  # 870 ordered pairs: DRO's top-k takes 512
    want, want_grads, want_beta = reference(run, x, y, loss=table, seed=5)
    loss_fn = rdml.Loss(**table, seed=5)
    got, grads = pytorch_step(model, lambda: loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y)))
    assert abs(got - want) <= 1e-5 * abs(want) + 1e-7, (name, got, want)
    assert worst(grads, want_grads) <= 1e-4, (name, worst(grads, want_grads))
    if loss_fn.beta is not None:
        assert want_beta is not None and abs(float(loss_fn.beta.grad) - want_beta) <= 1e-4 * abs(want_beta) + 1e-7


class BnNet(nn.Module):
    """A small CNN with batch norm and dropout, L2-normalised embeddings."""

    def __init__(self, dim=16):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
            nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, dim))

    def forward(self, x):
        return torch.nn.functional.normalize(self.body(x), dim=1)


def bn_state(model):
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}


@pytest.mark.parametrize("inner", ["eval", "train"])
def test_the_inner_maximisation_leaves_the_model_as_it_was(inner):
    torch.manual_seed(0)
    model = BnNet()
    model.train()
    model.body[9].eval()  # one submodule in eval mode: it stays so
    x, y = spc2()
    seen = []
    model.register_forward_pre_hook(lambda m, a: seen.append((m.training, bn_state(m))))
    before = bn_state(model)
    defense = rdml.Defense("act", eps=0.1, step=0.02, steps=3, inner=inner)
    loss = defense(model, torch.from_numpy(x), torch.from_numpy(y))
    # The inner maximisation ran in eval mode (or as the modes were), and the outer forward (the
    # last call) found every running statistic as it was before the step.
    assert all(t == (inner == "train") for t, _ in seen[:-1]) and len(seen) > 3
    last_training, last_state = seen[-1]
    assert last_training and all(torch.equal(last_state[k], before[k]) for k in before)
    # The outer forward updated the statistics, as a training forward does; modes and flags back.
    assert not torch.equal(bn_state(model)["body.1.running_mean"], before["body.1.running_mean"])
    assert model.training and not model.body[9].training and model.body[1].training
    assert all(p.requires_grad for p in model.parameters())
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_errors_name_the_keyword():
    torch.manual_seed(0)
    model = L2(c2f2(8))
    x, y = spc2()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    loss_fn = rdml.Loss(kind="triplet", miner="semihard")
    e = model(xt)

    def says(fn, *words):
        with pytest.raises((ValueError, TypeError)) as info:
            fn()
        text = str(info.value)
        assert all(w in text for w in words), text

    says(lambda: loss_fn(e.detach(), yt), "embeddings", "no graph")
    says(lambda: loss_fn(e, yt[:5]), "labels", "expected 16 labels")
    says(lambda: loss_fn(e[0], yt), "embeddings", "N × D")
    says(lambda: loss_fn(e * float("nan"), yt), "embeddings", "non-finite")
    says(lambda: loss_fn(e * 2, yt), "embeddings", "length", "L2-normalise")
    says(lambda: loss_fn(e, yt, ref_emb=e), "ref_emb")
    says(lambda: loss_fn(e, yt - 1), "labels", "label -1")
    says(lambda: rdml.Loss(kind="triplet", margn=0.1), "loss", "margn")
    says(lambda: rdml.Loss(kind="npair")(e, yt, indices_tuple=([0], [1], [2])), "indices_tuple", "npair")
    says(lambda: loss_fn(e, yt, indices_tuple=([0], [1], [99])), "indices_tuple", "outside the batch of 16")
    # A defense whose loss it cannot train on; a model that changes its width between steps.
    says(lambda: rdml.Defense("act", eps=0.1, step=0.1, steps=1, loss=dict(kind="npair")), "triplet", "npair")
    says(lambda: rdml.Defense("act", eps=0.1, step=0.1, steps=1, rate=1), "rate")
    defense = rdml.Defense("act", eps=0.1, step=0.05, steps=1)
    defense(model, xt, yt).backward()
    says(lambda: defense(L2(c2f2(4)), xt, yt), "4-dimensional", "8-dimensional")
    says(lambda: defense(model, xt * 255, yt), "images", "outside [0, 1]")
    says(lambda: defense(model, xt, yt[:3]), "labels", "expected 16")
    # CA-TRIDE's schedule needs the epoch; MDProp's batch-norm sets need the model split.
    tride = rdml.Defense.preset("fashion-c2f2-ca-tride")
    says(lambda: tride(model, xt, yt), "start_epoch")
    mdprop = rdml.Defense("mdprop", eps=0.01, step=0.01, steps=1, distributions=[dict(kind="stax")])
    says(lambda: mdprop(BnNet(), xt, yt), "split_batch_norm(model, 2)")


def test_a_defense_resumes_from_its_state_dict():
    """HM's LGA keeps the last adversarial loss; the stream goes on where it stood."""
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = spc2()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    table = dict(eps=0.1, step=0.02, steps=4, source="random", destination="lga", ics=0.5)
    one = rdml.Defense("hm", seed=7, **table)
    first = float(one(model, xt, yt).detach())
    saved = json.loads(json.dumps(one.state_dict()))
    assert saved["state"]["steps_done"] == 1 and saved["state"]["prev_loss"] == pytest.approx(one.last["adversarial_loss"])
    second = float(one(model, xt, yt).detach())
    again = rdml.Defense("hm", seed=7, **table)
    again.load_state_dict(saved)
    assert float(again(model, xt, yt).detach()) == second
    fresh = rdml.Defense("hm", seed=7, **table)
    assert float(fresh(model, xt, yt).detach()) == first != second


def test_mdprop_trains_each_distribution_through_its_own_batch_norm_set():
    torch.manual_seed(0)
    model = rdml.split_batch_norm(BnNet(), 3)
    keys = [k for k in model.state_dict() if k.startswith("body.1.")]
    assert "body.1.sets.2.running_mean" in keys and "body.1.sets.0.weight" in keys
    x, y = spc2()
    defense = rdml.Defense("mdprop", eps=0.03, step=0.03, steps=1,
                           distributions=[dict(kind="stax"), dict(kind="mtax", targets=2)])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    defense(model, torch.from_numpy(x), torch.from_numpy(y)).backward()
    after = model.state_dict()
    # Each set's statistics moved with its own forward; every set's affine parameters have gradients.
    for k in range(3):
        assert not torch.equal(after[f"body.1.sets.{k}.running_mean"], before[f"body.1.sets.{k}.running_mean"])
        assert model.body[1].sets[k].weight.grad is not None
    assert model.body[1].active == 0
    # Inference uses the clean set alone: set 1 (moved away here) changes nothing outside its block.
    model.eval()
    with torch.no_grad():
        model.body[1].sets[1].running_mean.add_(5.0)
        default = model(torch.from_numpy(x))
        with rdml.batch_norm_set(model, 0):
            clean = model(torch.from_numpy(x))
        with rdml.batch_norm_set(model, 1):
            other = model(torch.from_numpy(x))
    assert torch.equal(default, clean) and not torch.allclose(default, other)


def test_an_attack_returns_its_adversarial_images():
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = fashion(40)
    xt = torch.from_numpy(x)
    atk = rdml.Attack("ES", eps=0.1, step=0.02, steps=8)
    adv, result = atk(model, xt, torch.from_numpy(y), return_scores=True)
    assert isinstance(adv, torch.Tensor) and adv.shape == xt.shape and adv.dtype == xt.dtype
    change = (adv - xt).abs().flatten(1).max(1).values
    assert float(change.max()) <= 0.1 + 1e-6 and bool((change > 0).all()) and float(adv.min()) >= 0 and float(adv.max()) <= 1
    assert sorted(result["attacked"]) == list(range(40)) and not result["of_gallery"]
    # The images' embeddings moved as the attack's own score says, and as rdml.attack scores it.
    with torch.no_grad():
        shift = (model(adv) - model(xt)).norm(dim=1).mean()
    assert float(shift) > 0.05
    same = rdml.attack(model, x, y, "ES", eps=0.1, step=0.02, steps=8, queries=40, quiet=True)
    assert same["scores"] == result["scores"]
    # The first `queries` alone move; CA+ with a gallery moves the gallery's candidates.
    adv5 = atk(model, xt, torch.from_numpy(y), queries=5)
    assert bool((adv5[5:] == xt[5:]).all()) and bool((adv5[:5] != xt[:5]).any())
    g, gl = fashion(30, 100)
    ca, r = rdml.Attack("CA+:W=1", eps=0.1, step=0.02, steps=4)(model, xt[:8], y[:8], gallery=g, gallery_labels=gl,
                                                                  return_scores=True)
    assert ca.shape == (30, 1, 28, 28) and r["of_gallery"] and r["attacked"]
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_the_readme_harden_session_prints_what_the_readme_shows(tmp_path):
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text()
    code = re.search(r"<!-- harden-session -->\s*```python\n(.*?)```", text, re.S)
    shown = re.search(r"<!-- harden-output -->\s*```text\n(.*?)```", text, re.S)
    assert code and shown, "README: the hardening session and its output"
    (tmp_path / "data").symlink_to(root / "data")
    p = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    number = re.compile(r"-?\d+(\.\d+)?")
    got = [number.sub("N", line) for line in p.stdout.strip().splitlines()]
    assert got == [number.sub("N", line) for line in shown.group(1).strip().splitlines()], p.stdout


def test_a_loss_of_ones_own_in_place_of_est_and_mdprops_outer_loss():
    """EST and MDProp train on their loss alone, so a PML-style callable (with its miner) may take
    its place; here one that is rdml's own triplet loss gives rdml's numbers exactly."""
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = spc2()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    # (EST draws its first step's tie-break and MDProp its targets from the defense's stream, which
    # an outer loss of rdml's then goes on drawing from: losses that draw nothing for both, the
    # triplet loss on its hardest negatives and multi-similarity.)
    for table, loss in ((dict(kind="est", eps=0.1, step=0.02, steps=4), dict(kind="triplet", miner="hardest")),
                        (dict(kind="mdprop", eps=0.03, step=0.03, steps=1, distributions=[dict(kind="stax")]),
                         dict(kind="multi-similarity"))):
        rdml_loss = rdml.Loss(**loss, seed=4)
        own = rdml.Loss(**loss, seed=4)
        calls = []

        def pml_loss(e, labels, indices_tuple=None):
            calls.append(indices_tuple)
            return own(e, labels)

        want, want_grads = pytorch_step(model, lambda: rdml.Defense(**table, loss=rdml_loss, seed=4)(model, xt, yt))
        d = rdml.Defense(**table, loss=pml_loss, miner=lambda e, labels: ("mined", len(labels)), seed=4)
        got, grads = pytorch_step(model, lambda: d(model, xt, yt))
        assert got == pytest.approx(want, rel=1e-6) and worst(grads, want_grads) <= 1e-5
        assert calls == [("mined", 16)] * (1 if table["kind"] == "est" else 2) and d.last["steps_done"] == 1
    with pytest.raises(ValueError, match="act trains on rdml's triplet loss"):
        rdml.Defense("act", eps=0.1, step=0.1, steps=1, loss=lambda e, labels, indices_tuple=None: e.sum())


def test_what_a_defense_takes_is_used_or_refused():
    torch.manual_seed(0)
    model = L2(c2f2(8))
    x, y = spc2()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    act = rdml.Defense("act", eps=0.1, step=0.05, steps=1)
    with pytest.raises(ValueError, match="indices: defense act draws nothing"):
        act(model, xt, yt, indices=np.arange(16))
    with pytest.raises(ValueError, match="model, images: defense act keeps nothing"):
        act.start_epoch(0, 1, model=model, images=x, labels=y)
    with pytest.raises(ValueError, match="no triplet can be mined"):
        act(model, xt[:3], torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="no triplet can be mined"):
        rdml.Loss()(model(xt[:3]), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="indices_tuple: rows of this rank"):
        rdml.Loss(gather=True)(model(xt), yt, indices_tuple=([0], [1], [2]))
    with pytest.raises(ValueError, match="gather"):
        rdml.Defense("act", eps=0.1, step=0.1, steps=1, loss=rdml.Loss(gather=True))
    # A [loss] table with a trainable β: the defense owns it, and it learns.
    margin = rdml.Defense("est", eps=0.1, step=0.05, steps=1, loss=dict(kind="margin", miner="distance"))
    (beta,) = list(margin.parameters())
    margin(model, xt, yt).backward()
    assert beta.grad is not None and float(beta.grad) != 0
    # A preset's key taken from the keywords; UX's indices checked against the training set's labels.
    assert rdml.Defense.preset("fashion-c2f2-act", steps=2).table["steps"] == 2
    ux = rdml.Defense("mdprop", eps=0.03, step=0.01, steps=1, distributions=[dict(kind="ux", targets=1)])
    ux.start_epoch(0, 1, model=model, images=x, labels=y)
    wrong = np.arange(16)[::-1].copy()
    with pytest.raises(ValueError, match="indices: image 0 \\(label 0\\) is given as item 15 of the training set, which has label 7"):
        ux(model, xt, yt, indices=wrong)
    with pytest.raises(ValueError, match="holds 16 items"):
        ux(model, xt, yt, indices=np.arange(16) + 16)
    ux(model, xt, yt, indices=np.arange(16)).backward()


def test_mdprops_unadversarial_targets_come_from_the_training_set_given_at_the_epochs_start():
    torch.manual_seed(0)
    model = L2(c2f2(16))
    train_x, train_y = fashion(200)
    defense = rdml.Defense("mdprop", eps=0.03, step=0.01, steps=3, distributions=[dict(kind="ux", targets=2)])
    assert defense.info["needs_training_set"]
    b = np.concatenate([np.flatnonzero(train_y == c)[:2] for c in range(8)])
    xb, yb = torch.from_numpy(train_x[b]), torch.from_numpy(train_y[b])
    with pytest.raises(ValueError, match="start_epoch|training set"):
        defense(model, xb, yb, indices=b)
    with pytest.raises(ValueError, match="pass the model and the training images"):
        defense.start_epoch(0, 2)
    defense.start_epoch(0, 2, model=model, images=train_x, labels=train_y)
    with pytest.raises(ValueError, match="indices"):
        defense(model, xb, yb)
    loss = defense(model, xb, yb, indices=b)
    loss.backward()
    assert np.isfinite(float(loss.detach())) and defense.last["steps_done"] == 1
    assert model.training and all(p.grad is not None for p in model.parameters())


def test_es_under_robrank_compat_is_robranks_own_loop_step_for_step():
    """robrank's ES (advrank.py's PGD loop), written out in PyTorch as a user checking rdml would:
    the first step's loss is F.pairwise_distance(f(x'), f(x) + 1e-7), each later one's
    F.pairwise_distance(f(x'), f(x)), whose eps (1e-6) offsets every step, not only the first."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = L2(c2f2(32)).eval()
    x, y = fashion(32)
    xt = torch.from_numpy(x)
    eps, alpha, steps = 0.30196, 0.011764, 32

    def robranks(later_offset=True):
        with torch.no_grad():
            orig = model(xt)
        images = xt.clone()
        for it in range(steps):
            images.requires_grad_(True)
            out = model(images)
            if it == 0:
                dist = F.pairwise_distance(out, orig + 1e-7)
            else:
                dist = F.pairwise_distance(out, orig) if later_offset else (out - orig).norm(dim=1)
            (grad,) = torch.autograd.grad(-dist.sum(), images)
            images = images.detach() - alpha * grad.sign()
            images = torch.min(torch.max(images, xt - eps), xt + eps).clamp(0, 1)
        return images.detach()

    def same(a, b):
        return ((a - b).abs().flatten(1).max(1).values < 1e-5).numpy()

    adv = rdml.Attack("ES", eps=eps, step=alpha, steps=steps, robrank_compat=True)(model, xt, torch.from_numpy(y))
    theirs = robranks()
    assert same(adv, theirs).all(), f"{same(adv, theirs).sum()} of 32 queries as robrank's"
    # The later steps' offset matters on this model: without it, other images.
    assert not same(robranks(later_offset=False), theirs).all()


def test_one_act_step_and_two_hm_steps_replay_robranks_own():
    """A batch robrank's own code stepped through (bench/robrank_step_fixture.py: robrank's
    pnp_training_step and hm_training_step at its override_pgditer_8 budget), replayed through
    rdml.Defense with robrank's mined triplets: the same adversarial images and losses."""
    import gzip
    import hashlib

    import torch.nn.functional as F

    fx = np.load(Path(__file__).parent / "fixtures" / "robrank_steps.npz")
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 512))
    h = hashlib.sha256()
    for k, v in net.state_dict().items():
        h.update(k.encode())
        h.update(v.numpy().astype("<f4").tobytes())
    assert h.hexdigest() == str(fx["weights_sha256"]), "torch.manual_seed(0) drew other weights than the fixture's"

    class Recorded(nn.Module):
        """robrank's metric N: the backbone's rows L2-normalised; keeps what it embeds in training mode."""

        def __init__(self):
            super().__init__()
            self.net, self.trained_on = net, None

        def forward(self, x):
            if self.training:
                self.trained_on = x.detach().clone()
            return F.normalize(self.net(x))

    model = Recorded()
    d = Path(__file__).resolve().parents[2] / "data" / "fashion-mnist"
    px = np.frombuffer(gzip.decompress((d / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    lb = np.frombuffer(gzip.decompress((d / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    x = torch.from_numpy(px.reshape(-1, 1, 28, 28)[fx["items"]].astype(np.float32) / 255)
    y = torch.from_numpy(lb[fx["items"]].astype(np.int64))
    budget = dict(eps=77 / 255, step=3 / 255, steps=8)
    loss = dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2)

    def close(got, want, what):
        gap = float((torch.as_tensor(got) - torch.as_tensor(want)).abs().max())
        assert gap < 1e-4, f"{what}: {gap} from robrank's"

    act = rdml.Defense("act", loss=loss, **budget)
    t = fx["act_triplets"]
    out = act(model, x, y, triplets=tuple(t))
    # rdml embeds [a, p̃, ñ]; robrank's pncollapse returns [p̃, ñ].
    close(model.trained_on[len(t[0]):], fx["act_adv"], "ACT's adversarial positives and negatives")
    close(out.item(), fx["act_loss"], "ACT's loss")

    hm = rdml.Defense("hm", loss=loss, source="softhard", destination="lga", objective="et", ics=0.5, **budget)
    for k in range(2):
        assert hm.state_dict()["state"]["prev_loss"] == pytest.approx(float(fx[f"hm{k}_prev_loss"]), abs=1e-6)
        t = fx[f"hm{k}_triplets"]
        out = hm(model, x, y, triplets=tuple(t))
        # rdml embeds [ã, p̃, ñ, a, p] (ICS's clean anchors and positives after them).
        close(model.trained_on[: 3 * len(t[0])], fx[f"hm{k}_adv"], f"HM step {k}'s adversarial triplets")
        close(out.item(), fx[f"hm{k}_loss"], f"HM step {k}'s loss")
    # Triplets that are not the batch's, and a defense that mines none, are told.
    a, p, n = (list(v) for v in fx["act_triplets"])
    for bad, match in [
        ((a, p, n[:-1]), "triplets: 8 anchors, 8 positives and 7 negatives"),
        ((a, p), r"triplets: 2 sequences; expected \(anchors, positives, negatives\)"),
        ((a, p, [16] + n[1:]), "triplets: triplet 0 .* outside the batch of 16"),
        ((a, n, p), "triplets: triplet 0 .* a positive of the anchor's label"),
    ]:
        with pytest.raises(ValueError, match=match):
            act(model, x, y, triplets=bad)
    with pytest.raises(ValueError, match="triplets: defense est takes no triplets"):
        rdml.Defense("est", loss=loss, **budget)(model, x, y, triplets=(a, p, n))


def test_wrong_kinds_of_input_are_said_in_rdmls_words_naming_the_keyword():
    """Objects of the wrong kind are named by their keyword (the one adapter, `_inputs`), never
    a raw `TypeError` or `AttributeError` from rdml's own Python."""
    torch.manual_seed(0)
    model = L2(c2f2(16))
    x, y = spc2()
    xt = torch.from_numpy(x)
    defense = rdml.Defense("act", eps=0.1, step=0.02, steps=1)
    cases = [
        (lambda: defense.load_state_dict(3), TypeError, r"state: expected the dict state_dict\(\) returned, got int"),
        (lambda: rdml.Loss().load_state_dict([1]), TypeError, r"state: expected the dict state_dict\(\) returned"),
        (lambda: defense.start_epoch("a", 2), ValueError, "epoch: expected an integer, got 'a'"),
        (lambda: defense.start_epoch(0, 2.5), ValueError, "epochs: expected an integer, got 2.5"),
        (lambda: rdml.open(3), TypeError, r"run_dir: expected a path \(a str or os.PathLike\), got int"),
        (lambda: rdml.train("quickstart", ["runs"]), TypeError, "out: expected a path"),
        (lambda: rdml.Attack("CA+")(model, xt, None), ValueError, "labels: missing; pass one label per image"),
        (lambda: rdml.attack(model, x, y, "CA+", steps="x", quiet=True), ValueError,
         r'options.steps: a value of the wrong kind \(string "x", where usize was expected\)'),
        (lambda: rdml.Defense("act", eps="big"), ValueError,
         r'defense.eps: a value of the wrong kind \(string "big", where f32 was expected\)'),
        (lambda: rdml.Loss(kind="triplet", margin=[1]), ValueError, "loss.margin: a value of the wrong kind"),
    ]
    for call, kind, said in cases:
        with pytest.raises(kind, match=said):
            call()
    # Numbers of NumPy's and torch's types are numbers.
    r = rdml.attack(model, x, y, "CA+", queries=np.int64(4), steps=torch.tensor(1), eps=np.float32(0.1), quiet=True)
    assert r["queries"] == 4
    defense.start_epoch(np.int64(0), 2.0)


def test_tensors_and_models_on_the_meta_device_are_said_as_holding_no_values():
    """PyTorch's meta device (shapes, no values: a model built before its weights are loaded),
    refused naming the keyword wherever a tensor or model enters rdml, not a failed copy."""
    with torch.device("meta"):
        meta = nn.Sequential(nn.Flatten(), nn.Linear(784, 8))
    x, y = spc2()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    cases = [
        (lambda: rdml.embed(meta, x), "model: its parameters are on the meta device"),
        (lambda: rdml.Defense("act", eps=0.1, step=0.01, steps=1)(meta, xt, yt), "model: its parameters are on the meta"),
        (lambda: rdml.Loss()(meta(xt.to("meta")), yt), "embeddings: on the meta device, which holds shapes and no values"),
        (lambda: rdml.metrics(torch.zeros(4, 2, device="meta"), [0, 0, 1, 1]), "embeddings: on the meta device"),
        (lambda: rdml.robustness(L2(c2f2(8)), xt.to("meta"), y, queries=4, quiet=True), "images: on the meta device"),
        (lambda: rdml.metrics(torch.zeros(4, 2), torch.zeros(4, dtype=torch.int64, device="meta")),
         "labels: on the meta device"),
    ]
    for call, said in cases:
        with pytest.raises(ValueError, match=said):
            call()


def test_a_losss_indices_tuple_is_checked_as_a_defenses_triplets_are():
    """One rule for triplets a caller mined (harden/given.rs): rows inside the batch, a positive
    of the anchor's label (the anchor itself allowed), a negative of another; named as the
    keyword given."""
    e = torch.nn.functional.normalize(torch.randn(8, 4), dim=1).requires_grad_()
    y = torch.arange(8) % 4  # rows 0 and 4 share label 0, 1 and 5 label 1
    t = lambda *v: torch.tensor(v)
    loss = rdml.Loss(kind="triplet")
    for bad, match in [
        ((t(0), t(1), t(2)), r"indices_tuple: triplet 0 \(0, 1, 2\): expected a positive of the anchor's label"),
        ((t(0, 1), t(4, 5), t(4, 2)), r"indices_tuple: triplet 0 \(0, 4, 4\): .* a negative of another"),
        ((t(0), t(4), t(99)), r"indices_tuple: triplet 0 \(0, 4, 99\) names a row outside the batch of 8"),
        ((t(0, 1), t(4), t(1)), "indices_tuple: 2 anchors, 1 positives and 1 negatives"),
    ]:
        with pytest.raises(ValueError, match=match):
            loss(e, y, indices_tuple=bad)
    # Valid ones, the anchor as its own positive too, are taken.
    assert float(loss(e, y, indices_tuple=(t(0, 1), t(4, 1), t(1, 2)))) >= 0
