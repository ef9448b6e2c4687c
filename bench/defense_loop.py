"""The cost of rdml's defense in a PyTorch loop: one ACT training step (robrank's `pnp`: random
negatives mined on the clean embeddings, the positive and negative moved toward each other by 8
L∞ PGD steps of 3/255 in 77/255, the model in eval mode, then the triplet loss of the training-mode
forward and an Adam step) written in plain PyTorch, against the same step through `rdml.Defense`
(and `rdml.Loss`), on the same model, batch and threads, alternated in one run. The plain step
forwards only the rows that move, as rdml's engine does (the anchors are not in ACT's objective).

Usage: python bench/defense_loop.py [--arch c2f2|resnet18] [--pairs P] [--reps R] [--threads 2]
       [--device cpu|cuda] [--pgd-steps 8] [--json OUT]
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import rdml

EPS, STEP, STEPS = 77 / 255, 3 / 255, 8


class Embedder(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, x):
        return F.normalize(self.backbone(x), dim=1)


def network(arch):
    torch.manual_seed(0)
    if arch == "c2f2":
        return Embedder(nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 512))), (1, 28, 28)
    import torchvision

    m = torchvision.models.resnet18(weights=None, num_classes=512)
    return Embedder(m), (3, 224, 224)


def batch(pairs, shape, device):
    """SPC-2: `pairs` pairs of one class each (class-dependent smooth images)."""
    g = torch.Generator().manual_seed(1)
    classes = torch.arange(pairs) % max(pairs // 2, 2)
    base = torch.rand((int(classes.max()) + 1,) + shape, generator=g)
    x = (base[classes.repeat_interleave(2)] + 0.1 * torch.rand((2 * pairs,) + shape, generator=g)).clamp(0, 1)
    return x.to(device), classes.repeat_interleave(2).to(device)


def d(a, b):
    return (a - b).pow(2).sum(1).add(1e-12).sqrt()


def plain_step(model, opt, x, y, rng):
    model.eval()
    with torch.no_grad():
        model(x)  # the clean embeddings robrank mines on (random negatives need no distances)
    yn = y.cpu().numpy()
    anc = np.arange(0, len(yn), 2)
    neg = np.array([rng.choice(np.flatnonzero(yn != yn[i])) for i in anc])
    t = len(anc)
    pn0 = torch.cat([x[anc + 1], x[neg]])
    pn = pn0.clone()
    for p in model.parameters():
        p.requires_grad_(False)
    for _ in range(STEPS):
        pn.requires_grad_(True)
        e = model(pn)
        g, = torch.autograd.grad(d(e[:t], e[t:]).mean(), pn)
        with torch.no_grad():
            pn = torch.min(torch.max(pn - STEP * g.sign(), pn0 - EPS), pn0 + EPS).clamp(0, 1)
    for p in model.parameters():
        p.requires_grad_(True)
    model.train()
    e = model(torch.cat([x[anc], pn.detach()]))
    loss = F.relu(d(e[:t], e[t:2 * t]) - d(e[:t], e[2 * t:]) + 0.2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss)


def rdml_step(model, opt, x, y, defense):
    model.train()
    loss = defense(model, x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="c2f2")
    ap.add_argument("--pairs", type=int)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pgd-steps", type=int, default=STEPS, help="the inner maximisation's steps (8, robrank's override)")
    ap.add_argument("--json")
    a = ap.parse_args()
    globals()["STEPS"] = a.pgd_steps
    torch.set_num_threads(a.threads)
    pairs = a.pairs or (128 if a.arch == "c2f2" else 8)
    model, shape = network(a.arch)
    model.to(a.device)
    x, y = batch(pairs, shape, a.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    defense = rdml.Defense("act", eps=EPS, step=STEP, steps=STEPS, loss=rdml.Loss(kind="triplet", miner="random"))
    rng = np.random.default_rng(0)
    times = {"pytorch": [], "rdml": []}
    sync = (lambda: torch.cuda.synchronize()) if a.device.startswith("cuda") else (lambda: None)
    for rep in range(a.reps + 1):
        for name in ("pytorch", "rdml"):
            sync()
            t0 = time.perf_counter()
            plain_step(model, opt, x, y, rng) if name == "pytorch" else rdml_step(model, opt, x, y, defense)
            sync()
            if rep > 0:  # the first of each warms up
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = dict(arch=a.arch, images=2 * pairs, shape=list(shape), pgd_steps=STEPS, reps=a.reps, threads=a.threads,
               device=a.device, torch=torch.__version__, median_seconds=med, all_seconds=times,
               ratio=med["rdml"] / med["pytorch"])
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
