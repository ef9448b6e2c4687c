"""NMI's k-means: rdml.metrics(nmi=True) against faiss.Kmeans (as PML's AccuracyCalculator runs it),
on the embeddings of bench/metrics_pml.py, in one run, 2 threads each (issue 40).

Needs, in one venv: the rdml package, faiss-cpu and scikit-learn (PyPI). Usage:
    python bench/kmeans_faiss.py [N C D]    # default 12000 2400 512
    FAISS_SEEDS=1234,1,2,3 RDML_SEEDS=0,1,2,3 python bench/kmeans_faiss.py N C D   # the seed spread
Prints faiss's time and NMI for two seeds (25 iterations at most; faiss stops once its objective
no longer changes) and rdml's time for the metrics with and without NMI, the difference being
its k-means (faiss's: a random start, Lloyd iterations until no assignment changes, a sample of 256
points per centroid) and NMI.
"""
import os, sys, time
import numpy as np
import faiss
import rdml
from sphere_embeddings import sphere_embeddings
from sklearn.metrics import normalized_mutual_info_score as nmi

n, c, d = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (12000, 2400, 512)
x, labels = sphere_embeddings(n, c, d)
faiss.omp_set_num_threads(2)
for seed in (int(v) for v in os.environ.get("FAISS_SEEDS", "1234,1").split(",")):
    t = time.perf_counter()
    km = faiss.Kmeans(d, c, niter=25, seed=seed)
    km.train(x)
    _, idx = km.index.search(x, 1)
    print(f"faiss k-means, seed {seed}: {time.perf_counter() - t:.2f} s, NMI {nmi(labels, idx[:, 0]):.4f}", flush=True)
t = time.perf_counter()
rdml.metrics(x, labels, recall_ks=(1,), nmi=False, pi_ratio=False)
t0 = time.perf_counter() - t
t = time.perf_counter()
m = rdml.metrics(x, labels, recall_ks=(1,), nmi=True, pi_ratio=False)
t1 = time.perf_counter() - t
print(f"rdml: metrics {t0:.2f} s, with NMI {t1:.2f} s: k-means and NMI {t1 - t0:.2f} s, NMI {m['nmi']:.4f}")
for seed in (int(v) for v in os.environ.get("RDML_SEEDS", "0").split(",")[1:]):
    m = rdml.metrics(x, labels, recall_ks=(1,), nmi=True, pi_ratio=False, seed=seed)
    print(f"rdml NMI, seed {seed}: {m['nmi']:.4f}", flush=True)
