"""rdml.metrics against pytorch-metric-learning's AccuracyCalculator (faiss-cpu k-NN and k-means)
on the same embeddings, in one run on one machine: the numbers side by side and the time ratio.

Embeddings: N items of C classes (N/C per class), D dimensions, unit length: class centres drawn
on the sphere, items = centre + Gaussian noise (seed 0), hard enough that R@1 is far from 0 and 1.

Needs, in one venv: the rdml package (pip install ./python), torch, pytorch-metric-learning and
faiss-cpu (PyPI). Usage (from the repository root):
    python bench/metrics_pml.py [N C D] [--nmi]    # default 60000 12000 512
Prints a table and writes bench/out/metrics_pml.json. With --nmi, a second run adds NMI to both
(k-means with k = C on both sides: faiss's in PML, rdml's own; the clusterings differ, so the
NMIs agree only roughly); at 12,000 clusters that k-means is most of the time.
"""
import json, os, sys, time
import numpy as np
import torch
import faiss
import rdml
from sphere_embeddings import sphere_embeddings
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

args = [a for a in sys.argv[1:] if a != "--nmi"]
n, c, d = (int(v) for v in args[:3]) if len(args) >= 3 else (60000, 12000, 512)
x, labels = sphere_embeddings(n, c, d)
threads = torch.get_num_threads()
print(f"{len(x)} embeddings × {d}, {c} classes; torch {torch.__version__}, faiss {faiss.__version__}, "
      f"{threads} threads", flush=True)

def timed(f):
    t = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t

rows = {}
for with_nmi in (False, True) if "--nmi" in sys.argv else (False,):
    include = ("precision_at_1", "r_precision", "mean_average_precision_at_r") + (("NMI",) if with_nmi else ())
    # k = "max_bin_count" retrieves R (the class size less the query) neighbours, all that
    # R@1, R-precision and MAP@R need; PML's default (k=None) retrieves every item, an n × n
    # index matrix (29 GB at 60,000 items).
    calc = AccuracyCalculator(include=include, device=torch.device("cpu"), k="max_bin_count")
    pml, t_pml = timed(lambda: calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(labels)))
    ours, t_rdml = timed(lambda: rdml.metrics(x, labels, recall_ks=(1,), nmi=with_nmi, pi_ratio=False))
    rows["with NMI" if with_nmi else "retrieval only"] = {
        "pml_seconds": t_pml, "rdml_seconds": t_rdml, "ratio_rdml_over_pml": t_rdml / t_pml,
        "pml": {k: float(v) for k, v in pml.items()},
        "rdml": {k: ours[k] for k in ("recall@1", "r_precision", "map@r", "nmi") if k in ours},
    }
    print(f"\n{'with NMI' if with_nmi else 'retrieval only'}: PML {t_pml:.2f} s, rdml {t_rdml:.2f} s, "
          f"rdml/PML = {t_rdml / t_pml:.2f}", flush=True)
    pairs = [("precision_at_1", "recall@1"), ("r_precision", "r_precision"),
             ("mean_average_precision_at_r", "map@r")] + ([("NMI", "nmi")] if with_nmi else [])
    for a, b in pairs:
        print(f"  {a:28} {pml[a]:.6f}   rdml {b:12} {ours[b]:.6f}   |Δ| {abs(pml[a] - ours[b]):.2e}")

os.makedirs("bench/out", exist_ok=True)
with open("bench/out/metrics_pml.json", "w") as f:
    json.dump({"n": len(x), "classes": c, "dim": d, "threads": threads, "torch": torch.__version__,
               "faiss": faiss.__version__, "rows": rows}, f, indent=1)
