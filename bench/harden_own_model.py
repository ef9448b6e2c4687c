"""A model rdml cannot import, hardened in a plain PyTorch loop ("Harden your own PyTorch model"):
a depthwise-separable CNN with GroupNorm and GELU, trained on Fashion-MNIST with robrank's
triplet loss (random negatives, margin 0.2) once plain and once with rdml's ACT (`rdml.Defense`),
the same seed, batches and number of steps; both then scored by `rdml.robustness` (robrank's
rob28 suite, ε = 77/255) on the same queries. Prints one JSON line per model.

Data: the 10,000 test images rdml ships (images 0–7,999 train, 8,000–9,999 are scored), or the
full Fashion-MNIST with --data DIR (train: its 60,000; scored: its test split's first 2,000).

Usage: python bench/harden_own_model.py [--steps 300] [--pairs 32] [--pgd-steps 8] [--queries 256]
       [--threads 2] [--data DIR] [--json OUT]
"""
import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import rdml

ROOT = Path(__file__).resolve().parents[1]


def idx(path):
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def data(folder):
    if folder is None:
        d = ROOT / "data" / "fashion-mnist"
        x, y = idx(d / "t10k-images-idx3-ubyte.gz"), idx(d / "t10k-labels-idx1-ubyte.gz")
        return (x[:8000], y[:8000]), (x[8000:], y[8000:])
    d = Path(folder)
    find = lambda stem: next(p for p in d.iterdir() if p.name.startswith(stem))
    train = idx(find("train-images")), idx(find("train-labels"))
    test = idx(find("t10k-images")), idx(find("t10k-labels"))
    return train, (test[0][:2000], test[1][:2000])


def model(dim=64):
    """Depthwise-separable convolutions, GroupNorm, GELU: not one of rdml's architectures."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.GELU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.Conv2d(32, 64, 1), nn.GroupNorm(8, 64), nn.GELU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.Conv2d(64, 128, 1), nn.GroupNorm(8, 128), nn.GELU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(512, dim), Normalize())


class Normalize(nn.Module):
    def forward(self, x):
        return F.normalize(x, dim=1)


def spc2(labels, pairs, rng):
    """robrank's SPC-2 batch: `pairs` pairs, each two images of one class drawn at random."""
    by = [np.flatnonzero(labels == c) for c in range(int(labels.max()) + 1)]
    out = []
    for c in rng.integers(0, len(by), pairs):
        out += list(rng.choice(by[c], 2, replace=False))
    return np.array(out)


def train(defended, args, train_set):
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = rdml.Loss(kind="triplet", miner="random", margin=0.2, seed=0)
    defense = rdml.Defense("act", eps=77 / 255, step=3 / 255, steps=args.pgd_steps, loss=loss_fn, seed=0)
    x_all = torch.from_numpy(train_set[0].astype(np.float32)[:, None] / 255)
    y_all = torch.from_numpy(train_set[1].astype(np.int64))
    rng = np.random.default_rng(0)
    t0 = time.time()
    for step in range(args.steps):
        b = spc2(train_set[1], args.pairs, rng)
        x, y = x_all[b], y_all[b]
        net.train()
        loss = defense(net, x, y) if defended else loss_fn(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net, time.time() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--pairs", type=int, default=32)
    p.add_argument("--pgd-steps", type=int, default=8)
    p.add_argument("--queries", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data")
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    train_set, test_set = data(args.data)
    xt = test_set[0].astype(np.float32)[:, None] / 255
    yt = test_set[1].astype(np.int64)
    rows = []
    for defended in (False, True):
        net, secs = train(defended, args, train_set)
        net.eval()
        emb = rdml.embed(net, xt)
        m = rdml.metrics(emb, yt, nmi=False)
        t = rdml.robustness(net, xt, yt, queries=args.queries, quiet=True)["table"]
        row = dict(model="ACT" if defended else "plain", steps=args.steps, pairs=args.pairs,
                   pgd_steps=args.pgd_steps if defended else 0, train_seconds=round(secs, 1),
                   recall_at_1=round(m["recall@1"], 4), map_at_r=round(m["map@r"], 4),
                   ers=round(t["ers"], 1), ars=round(t["ars"], 1),
                   columns={r["column"]: round(r["raw"], 3) for r in t["rows"]})
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
