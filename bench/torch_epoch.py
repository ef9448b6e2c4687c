"""One training epoch of robrank's fashion:rc2f2:ptripletN in PyTorch, for a side-by-side timing
with `rdml train --config fashion-c2f2-triplet`: C2F2, SPC-2 batches of 128 pairs (each training
image once as an anchor, paired with a random same-class image), triplet loss (margin 0.2, random
negatives, L2-normalised embeddings, Euclidean distance), Adam lr 1e-3 wd 1e-7. CPU only.

Usage: python bench/torch_epoch.py --data DIR [--threads 2] [--batches N] [--json OUT]
"""
import argparse, gzip, json, struct, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)


class C2F2(nn.Module):
    def __init__(self, emb=512):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(3136, 1024)
        self.fc2 = nn.Linear(1024, emb)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.normalize(self.fc2(x), dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=0, help="0 = the whole epoch")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz")
    y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz").astype(np.int64)
    by_class = {c: np.nonzero(y == c)[0] for c in np.unique(y)}
    model = C2F2()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-7)
    order = rng.permutation(len(y))
    batches = [order[i:i + 128] for i in range(0, len(order), 128)]
    if a.batches:
        batches = batches[: a.batches]
    t0 = time.perf_counter()
    total = 0.0
    for b in batches:
        pos = np.array([rng.choice(by_class[y[i]][by_class[y[i]] != i]) for i in b])
        idx = np.stack([b, pos], 1).reshape(-1)
        xb = torch.from_numpy(x[idx].astype(np.float32) / 255.0)
        yb = y[idx]
        emb = model(xb)
        # Random negatives, mined on detached embeddings as robrank does.
        anc = np.arange(0, len(idx), 2)
        neg = np.array([rng.choice(np.nonzero(yb != yb[i])[0]) for i in anc])
        loss = F.triplet_margin_loss(emb[anc], emb[anc + 1], emb[neg], margin=0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    secs = time.perf_counter() - t0
    out = {"framework": "pytorch " + torch.__version__, "threads": a.threads, "batches": len(batches),
           "seconds": secs, "mean_loss": total / len(batches)}
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
