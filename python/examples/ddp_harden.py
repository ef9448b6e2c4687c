"""rdml's ACT in a DistributedDataParallel loop, one process per GPU (NCCL) or per CPU share (gloo):

    torchrun --nproc_per_node 2 python/examples/ddp_harden.py [--steps 200] [--pairs 32]

Each rank draws its own SPC-2 batches, and `rdml.Defense` perturbs and mines them on that rank
(robrank's behaviour under DDP): the attack goes through `ddp.module`, so DDP's gradient hooks
and buffer broadcasts see only the outer forward, which goes through the wrapper; DDP averages
the gradients. Every rank then scores the model with `rdml.robustness`, its work split over the
ranks. Data: the Fashion-MNIST test
images rdml ships (0–7,999 train, 8,000–9,999 scored).
"""
import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import rdml

ROOT = Path(__file__).resolve().parents[2]


class Normalize(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.normalize(x, dim=1)


def fashion():
    d = ROOT / "data" / "fashion-mnist"
    x = np.frombuffer(gzip.decompress((d / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    y = np.frombuffer(gzip.decompress((d / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    return x.reshape(-1, 1, 28, 28).astype(np.float32) / 255, y.astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--queries", type=int, default=64)
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.GroupNorm(4, 16), torch.nn.GELU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.GELU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(512, 64), Normalize()).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    defense = rdml.Defense("act", eps=77 / 255, step=3 / 255, steps=8, seed=rank,
                           loss=rdml.Loss(kind="triplet", miner="random"))
    x, y = fashion()
    rng = np.random.default_rng(1000 + rank)  # each rank its own batches
    for step in range(a.steps):
        b = np.concatenate([rng.choice(np.flatnonzero(y[:8000] == c), 2, replace=False)
                            for c in rng.integers(0, 10, a.pairs)])
        loss = defense(ddp, torch.from_numpy(x[b]).to(device), torch.from_numpy(y[b]).to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    # Every rank scores: each embeds and attacks its share of the queries, and every rank gets the
    # whole table (DDP keeps the weights equal; GroupNorm has no statistics to tell apart).
    table = rdml.robustness(model, x[8000:], y[8000:], queries=a.queries, quiet=True)["table"]
    if rank == 0:
        print(f"{world} ranks, {a.steps} steps: loss {float(loss.detach()):.3f}, ERS {table['ers']:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
