"""On the model's device: a PGD run over a PyTorch model holds its batch where the model lives.
rdml hands the model side the clean rows, the start and the budget once; per step only the
moving rows' embeddings and the objective's gradient on them cross; the images come back at the
end. These tests watch every conversion of a tensor to NumPy or bytes, and every array made a
tensor, while the attack and the defense run, and read what the route reports as crossing."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import rdml  # noqa: E402
from rdml import _torch as route_side  # noqa: E402
from test_model import L2, fashion  # noqa: E402

B, D, SIDE = 16, 16, 224
IMAGE = 3 * SIDE * SIDE


def tiny(dim=D):
    """A model of almost no compute at 3 × 224 × 224: only the route's own cost is left."""
    torch.manual_seed(0)
    return L2(nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64, dim)))


def images(n=B, seed=0):
    g = np.random.default_rng(seed)
    return g.random((n, 3, SIDE, SIDE), dtype=np.float32), np.repeat(np.arange(n // 2), 2)


class Watch:
    """Every image-sized conversion (tensor → NumPy, NumPy → tensor) by the TorchModel method
    it happened in, and every method called, while installed."""

    def __init__(self, monkeypatch):
        self.calls, self.big, self.where = [], [], []
        numpy, from_numpy = torch.Tensor.numpy, torch.from_numpy

        def to_numpy(t, *a, **k):
            if t.numel() >= IMAGE:
                self.big.append(("numpy", self.where[-1] if self.where else None, t.numel(), len(self.calls) - 1))
            return numpy(t, *a, **k)

        def made(a):
            if a.size >= IMAGE:
                self.big.append(("from_numpy", self.where[-1] if self.where else None, a.size, len(self.calls) - 1))
            return from_numpy(a)

        monkeypatch.setattr(torch.Tensor, "numpy", to_numpy)
        monkeypatch.setattr(torch, "from_numpy", made)
        for name in ("embed", "pull_back", "hold", "step", "release"):
            original = getattr(route_side.TorchModel, name)

            def wrapped(obj, *a, _name=name, _f=original, **k):
                self.where.append(_name)
                self.calls.append(_name)
                try:
                    return _f(obj, *a, **k)
                finally:
                    self.where.pop()

            monkeypatch.setattr(route_side.TorchModel, name, wrapped)

    def inside_the_loop(self):
        """Image-sized conversions after a held run's start (its ``hold``) and before its end
        (its ``release``), outside those two calls."""
        first, last = self.calls.index("hold"), len(self.calls) - 1 - self.calls[::-1].index("release")
        return [b for b in self.big if first < b[3] < last and b[1] not in ("hold", "release")]


def per_step_bound(rows, dim):
    return 2 * rows * dim * 4 + 4096


def test_a_pgd_attack_holds_its_batch_on_the_models_side(monkeypatch):
    model = tiny()
    x, y = images()
    w = Watch(monkeypatch)
    adv, r = rdml.Attack("ES", eps=8 / 255, step=1 / 255, steps=16)(model, x, y, return_scores=True)
    # The clean embeddings are made before the run (no image gradient); the run itself is one
    # hold, 16 steps and one release, with no pull-back of an image gradient to the host.
    assert w.calls.count("hold") == 1 and w.calls.count("release") == 1 and w.calls.count("step") == 16, w.calls
    assert "pull_back" not in w.calls
    assert w.inside_the_loop() == [] and all(b[1] != "step" for b in w.big), w.big
    route = r["route"]
    assert route["steps"] == 16 and route["most_step_bytes"] <= per_step_bound(B, D), route
    assert route["step_bytes"] <= 16 * per_step_bound(B, D)
    assert route["backwards"] == 16 and route["forwards"] >= 16
    # The adversarial images: in the ε-ball, in [0, 1], and moved.
    change = (adv - torch.from_numpy(x)).abs()
    assert float(change.max()) <= 8 / 255 + 1e-6 and float(change.max()) > 0
    assert float(adv.min()) >= 0 and float(adv.max()) <= 1


def test_an_act_step_holds_its_batch_on_the_models_side(monkeypatch):
    model = tiny()
    x, y = images()
    defense = rdml.Defense("act", eps=8 / 255, step=1 / 255, steps=16)
    w = Watch(monkeypatch)
    loss = defense(model, torch.from_numpy(x), torch.from_numpy(y))
    loss.backward()
    assert w.calls.count("hold") == 1 and w.calls.count("release") == 1 and "pull_back" not in w.calls, w.calls
    assert w.inside_the_loop() == [] and all(b[1] != "step" for b in w.big), w.big
    route = defense.last["route"]
    rows = route["most_step_bytes"] // (2 * D * 4)
    assert route["steps"] == 16 and 1 <= rows <= 3 * B, route
    assert route["most_step_bytes"] <= per_step_bound(3 * B, D)
    assert np.isfinite(float(loss.detach()))


@pytest.mark.parametrize("norm,random_start", [("linf", False), ("linf", True), ("l2", False)])
def test_the_held_route_gives_the_host_routes_images(norm, random_start):
    """The same attack with the model side stepping (held) and with rdml stepping the images on
    the host (a model object without ``hold``): L∞ sign steps bit for bit (the same float32
    operations, random start included: rdml draws it); L2 within 1e-6, the normalisation's sum
    taken in another order."""
    model = tiny()
    x, y = fashion(32)
    x = np.repeat(x, 3, axis=1)
    eps, step = (8 / 255, 1 / 255) if norm == "linf" else (0.5, 0.1)
    attack = rdml.Attack("ES", eps=eps, step=step, steps=8, norm=norm, random_start=random_start)
    held = attack(model, x, y).numpy()

    class Host(route_side.TorchModel):
        hold = property(lambda self: (_ for _ in ()).throw(AttributeError("hold")))

    original = route_side.TorchModel
    try:
        rdml._model.TorchModel = Host
        here = attack(model, x, y).numpy()
    finally:
        rdml._model.TorchModel = original
    if norm == "linf":
        assert np.array_equal(held, here)
    else:
        assert np.abs(held - here).max() <= 1e-6
    assert not np.array_equal(held, x)
