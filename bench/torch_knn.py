"""Recall@1/2/4/8 and MAP@R of N random d-dimensional unit embeddings with PyTorch's
`cdist` + `argsort`, in query chunks (a full N×N argsort does not fit in memory). The embeddings
and labels come from the same generator description as `cargo run --release --example knn_bench`
(written by it to a .npy-free raw file), so both sides score identical data.

Usage: python bench/torch_knn.py --emb FILE.f32 --labels FILE.u32 --n N --dim D [--threads 2]
"""
import argparse, json, time
import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emb", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=1000)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    e = torch.from_numpy(np.fromfile(a.emb, np.float32).reshape(a.n, a.dim))
    y = torch.from_numpy(np.fromfile(a.labels, np.uint32).astype(np.int64))
    counts = torch.bincount(y)
    t0 = time.perf_counter()
    hits = {k: 0.0 for k in (1, 2, 4, 8)}
    map_r = 0.0
    scored = 0
    for s in range(0, a.n, a.chunk):
        q = e[s:s + a.chunk]
        d = torch.cdist(q, e)
        d[torch.arange(len(q)), torch.arange(s, s + len(q))] = float("inf")  # leave self out
        order = d.argsort(dim=1)[:, :-1]
        rel = (y[order] == y[s:s + len(q)].unsqueeze(1))
        r = counts[y[s:s + len(q)]] - 1
        for k in hits:
            hits[k] += rel[:, :k].any(1).float().sum().item()
        rmax = int(r.max())
        relr = rel[:, :rmax].float()
        prec = relr.cumsum(1) / torch.arange(1, rmax + 1)
        inside = torch.arange(rmax).unsqueeze(0) < r.unsqueeze(1)
        ok = r > 0
        ap = (prec * relr * inside).sum(1) / r.clamp(min=1)
        map_r += float(ap[ok].sum())
        scored += int(ok.sum())
    secs = time.perf_counter() - t0
    out = {"framework": "pytorch " + torch.__version__, "seconds": secs,
           "recall": {k: v / a.n for k, v in hits.items()}, "map_at_r": map_r / max(scored, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
