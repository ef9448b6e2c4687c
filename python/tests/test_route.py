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
        for name in ("embed", "pull_back", "hold", "step", "release", "embed_noisy"):
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


def test_certifying_a_query_draws_its_copies_on_the_models_side(monkeypatch):
    """Certification of one query at 3 × 224 × 224: its pixels cross once, then per batch of
    copies only their embeddings (and the rows' numbers); the certificate does not depend on the
    batch size, as each copy's noise is the same in any batch."""
    model = tiny()
    x, y = images()
    kw = dict(queries=1, samples=300, select=20, sigma=0.25, quiet=True, per_query=True)
    w = Watch(monkeypatch)
    r = rdml.certify(model, x, y, batch=64, **kw)
    noisy = [i for i, c in enumerate(w.calls) if c == "embed_noisy"]
    assert len(noisy) == -(-320 // 64) and "hold" not in w.calls, w.calls
    # The query's pixels are made a tensor in the first call alone; no image-sized array leaves.
    inside = [b for b in w.big if b[1] == "embed_noisy"]
    assert all(b[3] == noisy[0] and b[0] == "from_numpy" for b in inside), inside
    route = r["route"]
    assert route["steps"] == len(noisy) and route["most_step_bytes"] <= per_step_bound(64, D), route
    again = rdml.certify(model, x, y, batch=100, **kw)
    assert again["per_query"] == r["per_query"] and again["certified"] == r["certified"]


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


@pytest.mark.parametrize("start,project", [("noise", False), ("uniform", True)])
def test_a_defenses_start_and_projection_hold_on_both_routes(monkeypatch, start, project):
    """N-FGSM (noise of 2ε, a step of ε, no projection) and FGSM-RS as a Defense's keys: the
    model side's steps give the host route's images bit for bit, and only an unprojected step
    leaves the ε-ball."""
    model = tiny()
    x, y = fashion(32)
    x = torch.from_numpy(np.repeat(x, 3, axis=1))
    eps = 8 / 255
    kw = dict(eps=eps, step=eps if start == "noise" else 1.25 * eps, steps=1, start=start, project=project)
    held, _ = rdml.Defense("act", **kw).perturb(model, x, torch.from_numpy(y))
    monkeypatch.setattr(route_side.TorchModel, "hold",
                        property(lambda self: (_ for _ in ()).throw(AttributeError("hold"))))
    here, rows = rdml.Defense("act", **kw).perturb(model, x, torch.from_numpy(y))
    assert torch.equal(held, here)
    moved = (here - x[rows.source]).abs().amax()
    if project:
        assert 0 < float(moved) <= eps + 1e-6
    else:
        assert 1.5 * eps < float(moved) <= 3 * eps + 1e-6
    with pytest.raises(ValueError, match="defense.noise = 3 is the radius of N-FGSM's start"):
        rdml.Defense("act", eps=eps, step=eps, steps=1, noise=3.0)


# The user's own forward, loss and device habits (issue "On the model's device", items 3 and 4).


class WithLogits(nn.Module):
    """A model as researchers write it: (unit-length embedding, class logits) from one trunk."""

    def __init__(self, dim=16, classes=10):
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.embed, self.logits = nn.Linear(128, dim), nn.Linear(128, classes)
        self.seen = []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        h = self.trunk(x)
        return torch.nn.functional.normalize(self.embed(h), dim=1), self.logits(h)


def pml_triplet(e, labels, indices_tuple=None, margin=0.2):
    """A loss of PyTorch metric learning's signature (its TripletMarginLoss over given triplets)."""
    a, p, n = indices_tuple
    d = lambda i, j: (e[i] - e[j]).pow(2).sum(1).clamp_min(1e-12).sqrt()
    return torch.relu(d(a, p) - d(a, n) + margin).mean()


def batch(pairs=8):
    x, y = fashion(400)
    idx = [i for c in range(pairs) for i in np.flatnonzero(y == c)[:2]]
    return torch.from_numpy(x[idx]), torch.from_numpy(y[idx])


def test_perturb_then_your_own_forward_a_pml_loss_and_a_ce_head():
    model = WithLogits()
    x, y = batch()
    defense = rdml.Defense("act", eps=0.1, step=0.02, steps=4, output=0, seed=1)
    x_adv, rows = defense.perturb(model, x, y)
    k = len(rows.anchors)
    assert x_adv.shape == (3 * k, 1, 28, 28) and x_adv.dtype == x.dtype and k >= 1
    assert torch.equal(rows.labels[rows.anchors], rows.labels[rows.positives])
    assert not torch.equal(rows.labels[rows.anchors], rows.labels[rows.negatives])
    assert torch.equal(rows.labels, y[rows.source])
    # ACT moves the positives and negatives within ε; the anchors stay clean.
    assert torch.equal(x_adv[:k], x[rows.source[:k]])
    change = (x_adv - x[rows.source]).abs()
    assert float(change.max()) <= 0.1 + 1e-6 and float(change[k:].max()) > 0
    assert defense.last["steps_done"] == 1 and not defense.last["awaiting_loss"]
    # Your own forward and loss: a PML loss over rows.indices_tuple plus a CE term on the logits.
    emb, logits = model(x_adv)
    loss = pml_triplet(emb, rows.labels, rows.indices_tuple) + torch.nn.functional.cross_entropy(logits, rows.labels)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    # The same seed's one-call step trains on the same perturbed rows.
    model.seen.clear()
    again = rdml.Defense("act", eps=0.1, step=0.02, steps=4, output=0, seed=1)
    again(model, x, y)
    assert torch.equal(model.seen[-1], x_adv)
    # finish() belongs to a defense that remembers its loss.
    with pytest.raises(ValueError, match="finish: no perturbed step waits"):
        defense.finish(loss)


def test_perturb_with_a_defense_that_remembers_its_loss_waits_for_it():
    model = WithLogits()
    x, y = batch()
    hm = rdml.Defense.preset("fashion-c2f2-hm-lga-ics", steps=2, output=0)
    x_adv, rows = hm.perturb(model, x, y)
    assert hm.last["awaiting_loss"] and hm.last["steps_done"] == 0
    for again in (lambda: hm.perturb(model, x, y), lambda: hm(model, x, y)):
        with pytest.raises(ValueError, match=r"call finish\(loss\)"):
            again()
    hm.finish(torch.tensor(0.25))
    assert hm.last["steps_done"] == 1 and hm.state_dict()["state"]["prev_loss"] == pytest.approx(0.25)
    x_adv, rows = hm.perturb(model, x, y)
    assert hm.last["awaiting_loss"]


def test_a_model_returning_embedding_and_logits_takes_output_everywhere():
    model = WithLogits()
    x, y = fashion(40)
    only = lambda t: model(t)[0]
    assert np.array_equal(rdml.embed(model, x, output=0), rdml.embed(only, x))
    a = rdml.attack(model, x, y, "ES", queries=4, steps=2, output=0, quiet=True)
    b = rdml.attack(only, x, y, "ES", queries=4, steps=2, quiet=True)
    assert a["scores"] == b["scores"]
    c = rdml.certify(model, x, y, queries=1, samples=200, select=20, output=lambda out: out[0], quiet=True)
    assert c["certified"] == rdml.certify(only, x, y, queries=1, samples=200, select=20, quiet=True)["certified"]
    adv = rdml.Attack("ES", steps=2, output=0)(model, x, y, queries=4, only_attacked=True)
    assert adv.shape == (4, 1, 28, 28)
    with pytest.raises(TypeError, match="output="):
        rdml.embed(model, x)
    with pytest.raises(ValueError, match="output: 5 is not in what the model returned"):
        rdml.embed(model, x, output=5)
    loss = rdml.Defense("act", eps=0.1, step=0.02, steps=2, output=0)(model, *batch())
    assert loss.dtype == torch.float32 and np.isfinite(float(loss.detach()))


def test_autocast_channels_last_and_a_compiled_module_through_attack_and_defense():
    """bf16 autocast on the CPU (rows normalised in bf16 accepted as unit length), channels_last
    inputs and weights, and a torch.compile'd module: the attack holds its batch as before, and
    the losses' values are float32."""
    x, y = batch()
    attack = rdml.Attack("ES", eps=8 / 255, step=2 / 255, steps=3)
    # autocast: the model runs in bf16; the objectives and the loss in float32.
    plain = WithLogits()
    one = lambda t: plain(t)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        adv, got = attack(one, x, y, return_scores=True)
        loss = rdml.Defense("act", eps=0.1, step=0.02, steps=2, output=0)(plain, x, y)
        e = one(x)
        assert e.dtype == torch.bfloat16
        triplet = rdml.Loss("triplet")(e, y)
    assert got["route"]["steps"] == 3 and float((adv - x).abs().max()) <= 8 / 255 + 1e-6
    assert loss.dtype == torch.float32 and triplet.dtype == torch.float32
    loss.backward()
    triplet.backward()
    assert all(torch.isfinite(p.grad).all() for p in [*plain.trunk.parameters(), *plain.embed.parameters()])
    # channels_last: inputs and weights; the defense's training forward gets channels_last images.
    cl = WithLogits().to(memory_format=torch.channels_last)
    xc = x.contiguous(memory_format=torch.channels_last)
    adv_cl, r_cl = rdml.Attack("ES", eps=8 / 255, step=2 / 255, steps=3, output=0)(cl, xc, y, return_scores=True)
    assert r_cl["route"]["steps"] == 3 and adv_cl.shape == x.shape
    cl.seen.clear()
    rdml.Defense("act", eps=0.1, step=0.02, steps=2, output=0)(cl, xc, y).backward()
    assert cl.seen[-1].is_contiguous(memory_format=torch.channels_last)
    # A compiled module: the same images and scores as the module itself (aot_eager runs the
    # same operations), and rdml.Loss inside a compiled training step (a graph break at rdml's
    # call), with the eager step's loss.
    comp = torch.compile(WithLogits(), backend="aot_eager")
    adv_c, r_c = rdml.Attack("ES", eps=8 / 255, step=2 / 255, steps=3, output=0)(comp, x, y, return_scores=True)
    adv_e, r_e = rdml.Attack("ES", eps=8 / 255, step=2 / 255, steps=3, output=0)(WithLogits(), x, y, return_scores=True)
    assert torch.equal(adv_c, adv_e) and r_c["scores"] == r_e["scores"]
    loss_fn = rdml.Loss("triplet", miner="random")
    m = WithLogits()
    step = torch.compile(lambda t, l: loss_fn(m(t)[0], l), backend="aot_eager")
    compiled = step(x, y)
    compiled.backward()
    eager = rdml.Loss("triplet", miner="random")(WithLogits()(x)[0], y)
    assert compiled.dtype == torch.float32 and float(compiled.detach()) == pytest.approx(float(eager.detach()), abs=1e-6)
    assert all(p.grad is not None for p in [*m.trunk.parameters(), *m.embed.parameters()])
    loss_c = rdml.Defense("act", eps=0.1, step=0.02, steps=2, output=0)(comp, x, y)
    loss_c.backward()
    assert np.isfinite(float(loss_c.detach()))


def test_a_batch_out_of_pair_layout_is_said_once():
    import warnings

    model = WithLogits()
    x, y = batch()
    shuffled = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])  # classes 0..7, then 0..7
    defense = rdml.Defense("act", eps=0.1, step=0.02, steps=1, output=0)
    with pytest.warns(rdml.RdmlWarning, match="not laid out as same-class pairs.*twice the rows"):
        defense(model, x[shuffled], y[shuffled])
    with warnings.catch_warnings():
        warnings.simplefilter("error", rdml.RdmlWarning)
        defense(model, x[shuffled], y[shuffled])  # once a session
        rdml.Defense("act", eps=0.1, step=0.02, steps=1, output=0)(model, x, y)  # pairs: nothing said


def test_a_defense_called_from_inside_its_own_models_forward_is_an_error_not_a_hang():
    """A wrapper that hardens inside `forward` called the defense again while the defense was
    asking the model: that waited on its own lock forever. Any method of the same defense called
    from there is an error naming the call, and the defense still works after it."""
    x, y = batch()
    defense = rdml.Defense("act", eps=0.1, step=0.02, steps=1, output=0)

    class Hardening(WithLogits):
        def __init__(self, inner_call):
            super().__init__()
            self.inner_call, self.depth = inner_call, 0

        def forward(self, t):
            if self.depth == 0 and not self.training:
                self.depth += 1
                try:
                    self.inner_call(self)
                finally:
                    self.depth -= 1
            return super().forward(t)

    for inner in (lambda m: defense(m, x, y), lambda m: defense.perturb(m, x, y), lambda m: defense.state_dict()):
        with pytest.raises(RuntimeError, match=r"defense (inner|perturb|state): called again from inside its own call"):
            defense(Hardening(inner), x, y)
    assert np.isfinite(float(defense(WithLogits(), x, y).detach()))


def test_certify_refuses_queries_that_are_all_alone_in_their_class_as_the_metrics_do():
    """Queries none of which has another item of its class have no Recall@1 to certify: a
    certified 0.0 was recorded. Both methods, with and without a gallery, refuse them in the
    words rdml.metrics uses."""
    model = WithLogits()
    x, _ = fashion(8)
    lone = np.arange(8)
    kw = dict(queries=4, samples=50, select=10, output=0, quiet=True)
    for method, more in (("cohen", {}), ("center", dict(samples=300, select=4000))):
        with pytest.raises(ValueError, match="queries: no query has another item of its class among the others"):
            rdml.certify(model, x, lone, method=method, **{**kw, **more})
    with pytest.raises(ValueError, match="no query has another item of its class among the others"):
        rdml.metrics(rdml.embed(model, x, output=0), lone, recall_ks=(1,))
    # A gallery that holds none of the queries' classes: refused too (before any copy is drawn).
    with pytest.raises(ValueError, match="gallery"):
        rdml.certify(model, x[:4], lone[:4], gallery=x[4:], gallery_labels=lone[4:], **kw)


def test_a_saved_state_is_checked_as_a_config_is():
    """Defense.load_state_dict took another defense's state, unknown keys in `state` and an epoch
    past the end, and trained on them: each is refused naming it, and a state the defense saved
    (or one of rdml before the kind was kept) still loads."""
    x, y = batch()
    hm = rdml.Defense.preset("fashion-c2f2-hm-lga-ics", steps=1, output=0)
    act = rdml.Defense("act", eps=0.1, step=0.02, steps=1, output=0)
    act(WithLogits(), x, y)
    saved = act.state_dict()
    assert saved["kind"] == "act"
    with pytest.raises(ValueError, match="state: saved by defense hm; this defense is act"):
        act.load_state_dict(hm.state_dict())
    with pytest.raises(ValueError, match=r"state: unknown key \"prev_los\" in defense hm's state; its memory keeps prev_loss"):
        hm.load_state_dict({**hm.state_dict(), "state": {**hm.state_dict()["state"], "prev_los": 1.0}})
    with pytest.raises(ValueError, match="state: unknown key \"mean\" in defense act's state; its memory keeps nothing"):
        act.load_state_dict({**saved, "state": {**saved["state"], "mean": 1.0}})
    with pytest.raises(ValueError, match="state: epoch 3 of 2; expected 0 ≤ epoch < epochs"):
        act.load_state_dict({**saved, "state": {**saved["state"], "epoch": 3, "epochs": 2}})
    act.load_state_dict(saved)
    act.load_state_dict({k: v for k, v in saved.items() if k != "kind"})
    assert act.state_dict() == saved


def test_a_nan_or_infinite_keyword_is_named_not_a_json_error():
    """JSON holds no NaN: a keyword holding one failed as the library's "expected value" at a
    column of a text the caller never wrote. Each is named, on every front of the package."""
    model = WithLogits()
    x, y = fashion(20)
    for call, key in [
        (lambda: rdml.attack(model, x, y, "ES", eps=float("nan"), output=0, quiet=True), "eps"),
        (lambda: rdml.certify(model, x, y, sigma=float("inf"), output=0, quiet=True), "sigma"),
        (lambda: rdml.Defense("act", eps=float("nan"), step=0.1, steps=1), "eps"),
        (lambda: rdml.Loss("triplet", margin=np.float32("nan")), "margin"),
        (lambda: rdml.certify(model, x, y, radii=(0.1, float("nan")), output=0, quiet=True), "radii"),
    ]:
        with pytest.raises(ValueError, match=rf"^{key}: (nan|inf); expected a finite number"):
            call()


def test_the_held_route_stops_early_as_the_host_route_does(monkeypatch):
    """HM's objective stops once the hardness saturates: the held route reads the same stop rule
    after each step, so a defense's perturbed rows are the host route's bit for bit, and the
    steps taken are the same."""
    from rdml import _defense

    x, y = batch()
    kw = dict(steps=32, output=0, seed=3)
    held = rdml.Defense.preset("fashion-c2f2-hm-lga-ics", **kw)
    x_held, rows_held = held.perturb(WithLogits(), x, y)
    taken = held.last["route"]["steps"]
    monkeypatch.setattr(_defense._SetModel, "hold", property(lambda self: (_ for _ in ()).throw(AttributeError("hold"))))
    host = rdml.Defense.preset("fashion-c2f2-hm-lga-ics", **kw)
    x_host, rows_host = host.perturb(WithLogits(), x, y)
    assert host.last["route"]["steps"] == 0 and host.last["route"]["backwards"] == taken
    assert torch.equal(x_held, x_host) and torch.equal(rows_held.source, rows_host.source)
    assert 1 <= taken < 32, taken  # it stopped early


def test_perturb_refuses_a_defense_of_several_batch_norm_sets():
    x, y = batch()
    model = WithLogits()
    advprop = rdml.Defense("advprop", eps=0.1, step=0.02, steps=1, output=0)
    with pytest.raises(ValueError, match="perturb: defense advprop trains 2 distributions"):
        advprop.perturb(rdml.split_batch_norm(model, 2) or model, x, y)


@pytest.mark.parametrize("env,want", [({"LOCAL_WORLD_SIZE": "2"}, "1"), ({"OMP_NUM_THREADS": "1"}, "1"),
                                      ({"LOCAL_WORLD_SIZE": "2", "RAYON_NUM_THREADS": "2"}, "2"), ({}, "cores")])
def test_rdmls_cpu_pool_follows_torchs_threads_where_the_launch_sized_them(env, want):
    """Under torchrun torch runs one thread a rank; rdml's own pool (its kernels, burn's CPU
    backend) the size of the machine on every rank would oversubscribe it. From Python it takes
    torch's thread count at its first call where the launch sized torch's (torchrun's ranks, or
    OMP_NUM_THREADS), unless RAYON_NUM_THREADS sizes it; a plain process keeps the cores."""
    import os
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(1); import numpy as np, rdml; from rdml import _rdml; "
            "rdml.metrics(np.eye(4, dtype=np.float32), [0, 0, 1, 1], recall_ks=(1,), nmi=False); "
            "print(_rdml.cpu_pool())")
    drop = ("RAYON_NUM_THREADS", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS")
    clean = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)
    want = str(len(os.sched_getaffinity(0))) if want == "cores" else want
    assert out.returncode == 0 and out.stdout.strip() == want, out.stderr
