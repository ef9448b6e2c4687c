"""The PyTorch route's own cost: one PGD step of `rdml.Attack("ES")` on a model of almost no
compute (a 1×1 convolution, a pooling and a linear head, so that only the route is left),
against the same step written in plain PyTorch (forward, `torch.autograd.grad`, sign step,
projection, clamp, and ES's objective: the squared distance to the clean embeddings), in the
same run, on the same device.

Each side runs an attack of STEPS and one of 1 step; a step's time is their difference over
STEPS − 1 (what set-up and the clean embeddings cost cancels). Medians of REPEATS (≥ 5), the
sides interleaved. Each case runs in a process of its own (`--case`), as a user's job does:
PyTorch's small-tensor step on this CPU depends on what ran before it in the process (after the
3×224×224 case, the 28×28 step of plain PyTorch runs about 4× faster than in a fresh process),
so `--one-process` also gives the figures of both cases in one process, 224² first.

    python bench/route.py                      # 3×224×224 batch 64 and 28×28 batch 256, CPU
    python bench/route.py --device cuda        # on a GPU (bench/gpu.sh runs it)

Needs torch and rdml's package (pip install ./python).
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


class Tiny(nn.Module):
    def __init__(self, channels, dim=64):
        super().__init__()
        self.conv, self.head = nn.Conv2d(channels, 4, 1), nn.Linear(64, dim)

    def forward(self, x):
        return F.normalize(self.head(F.adaptive_avg_pool2d(self.conv(x), 4).flatten(1)), dim=1)


def plain(model, x, eps, step, steps):
    """ES in plain PyTorch: maximise the squared distance to the clean embeddings."""
    with torch.no_grad():
        clean = model(x)
    xa = x.clone()
    for _ in range(steps):
        xa.requires_grad_(True)
        loss = -(model(xa) - clean).pow(2).sum()
        (g,) = torch.autograd.grad(loss, xa)
        with torch.no_grad():
            xa = torch.min(torch.max(xa - step * g.sign(), x - eps), x + eps).clamp(0, 1)
    return xa.detach()


def timed(f, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    f()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def case(channels, side, batch, steps, repeats, device):
    torch.manual_seed(0)
    model = Tiny(channels).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.rand(batch, channels, side, side, device=device)
    y = torch.arange(batch, device=device) // 2
    eps, step = 8 / 255, 1 / 255
    rd = {k: rdml.Attack("ES", eps=eps, step=step, steps=k) for k in (1, steps)}
    sides = {
        "rdml": lambda k: rd[k](model, x, y),
        "torch": lambda k: plain(model, x, eps, step, k),
    }
    per_step = {name: [] for name in sides}
    for f in sides.values():  # warm-up
        f(1)
    route = rd[steps](model, x, y, return_scores=True)[1]["route"]
    for _ in range(repeats):
        for name, f in sides.items():
            long, short = timed(lambda: f(steps), device), timed(lambda: f(1), device)
            per_step[name].append((long - short) / (steps - 1))
    med = {k: statistics.median(v) for k, v in per_step.items()}
    return dict(shape=[batch, channels, side, side], steps=steps, repeats=repeats,
                rdml_ms=1e3 * med["rdml"], torch_ms=1e3 * med["torch"], ratio=med["rdml"] / med["torch"],
                rdml_all_ms=[1e3 * v for v in per_step["rdml"]], torch_all_ms=[1e3 * v for v in per_step["torch"]],
                route_bytes_per_step=route["most_step_bytes"], route=route)


CASES = {"224": (3, 224, 64), "28": (1, 28, 256)}


def main():
    import subprocess
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--case", choices=sorted(CASES), help="run this case alone and print its row as JSON")
    ap.add_argument("--one-process", action="store_true", help="both cases in this process, 224 first")
    ap.add_argument("--out", default=None, help="a JSON file for the table")
    a = ap.parse_args()
    device = torch.device(a.device)
    if a.case:
        print(json.dumps(case(*CASES[a.case], a.steps, a.repeats, device)))
        return
    if a.one_process:
        rows = [case(*CASES[k], a.steps, a.repeats, device) for k in ("224", "28")]
    else:
        args = ["--device", a.device, "--steps", str(a.steps), "--repeats", str(a.repeats)]
        rows = [json.loads(subprocess.run([sys.executable, __file__, "--case", k] + args, check=True,
                                          capture_output=True, text=True).stdout.splitlines()[-1])
                for k in ("224", "28")]
    print(f"threads: torch {torch.get_num_threads()}; device {device}; "
          f"{'one process' if a.one_process else 'a process per case'}")
    print("| images | rdml.Attack ms/step | plain PyTorch ms/step | ratio | crossed per step |")
    print("|---|---|---|---|---|")
    for r in rows:
        b, c, h, w = r["shape"]
        print(f"| {b}×{c}×{h}×{w} | {r['rdml_ms']:.2f} | {r['torch_ms']:.2f} | {r['ratio']:.2f} | "
              f"{r['route_bytes_per_step']} B |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
