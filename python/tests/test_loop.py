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
from rdml import _run  # noqa: E402

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
    gradients 0.4 apart); up to 8 steps every preset agrees to 1e-6 in the loss."""
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
    """The loss to 1e-6, the gradients to 1e-5. (On a batch where two values of a max-pooling
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
