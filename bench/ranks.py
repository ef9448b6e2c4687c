"""Score across ranks: robrank's ERS suite (`rdml.robustness`, rob28) on a PyTorch C2F2 and
Fashion-MNIST test images, one process against the same call on every rank of a torchrun group
(gloo), same machine, one run of each.

    python bench/ranks.py --queries 256                          # one process (both cores)
    torchrun --nproc_per_node 2 bench/ranks.py --queries 256      # 2 ranks, one core each

Each prints the call's wall time, ERS and the rows the model was asked for (rank 0 prints every
rank's); `--out FILE` writes the record's table (the two tables are compared by
`python bench/ranks.py --compare A B`: equal but for timings). On 2 cores the ranks share the
machine with each other, so the split of the work, not a speed-up, is what this shows; on N GPUs
each rank has its own. Needs torch and rdml's package (pip install ./python).
"""
import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import rdml

ROOT = Path(__file__).resolve().parents[1]


class C2F2(nn.Module):
    """robrank's rc2f2, L2-normalised, counting the rows it embeds."""

    def __init__(self, dim=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, dim))
        self.rows = 0

    def forward(self, x):
        self.rows += x.shape[0]
        return F.normalize(self.net(x), dim=1)


def fashion(n):
    d = ROOT / "data" / "fashion-mnist"
    px = np.frombuffer(gzip.decompress((d / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    lb = np.frombuffer(gzip.decompress((d / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    return px.reshape(-1, 1, 28, 28)[:n].astype(np.float32) / 255, lb[:n].astype(np.int64)


def untimed(v):
    if isinstance(v, dict):
        return {k: untimed(x) for k, x in v.items() if k not in ("seconds", "route")}
    if isinstance(v, list):
        return [untimed(x) for x in v]
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2)
    a = ap.parse_args()
    if a.compare:
        x, y = (json.loads(Path(p).read_text()) for p in a.compare)
        same = untimed(x) == untimed(y)
        print(json.dumps(dict(equal_but_timings=same, ers=[x["ers"], y["ers"]])))
        sys.exit(0 if same else 1)
    ranked = "RANK" in os.environ
    if ranked:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = C2F2()
    x, y = fashion(a.images)
    t0 = time.perf_counter()
    r = rdml.robustness(model, x, y, queries=a.queries, batch=a.batch, quiet=True)
    seconds = time.perf_counter() - t0
    mine = dict(seconds=round(seconds, 2), rows=model.rows)
    said = [mine]
    if ranked:
        said = [None] * dist.get_world_size()
        dist.all_gather_object(said, mine)
    if not ranked or dist.get_rank() == 0:
        print(json.dumps(dict(ranks=len(said), threads=torch.get_num_threads(), ers=r["table"]["ers"],
                              per_rank=said, queries=a.queries)))
        if a.out:
            Path(a.out).write_text(json.dumps(r["table"]))
    if ranked:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
