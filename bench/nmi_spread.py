"""NMI of a run's test embeddings over five seeds: rdml.metrics, faiss.Kmeans (as robrank and PML
run it) and sklearn's KMeans (k-means++), mean ± sample std of each (issue 40).
Usage: python bench/nmi_spread.py RUN_FOLDER"""
import sys, numpy as np, faiss, rdml
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score as nmi
run = rdml.open(sys.argv[1], quiet=True)
e, y, _ = run.embed_split("test")
k = len(set(y.tolist()))
faiss.omp_set_num_threads(2)
r = [rdml.metrics(e, y, recall_ks=(1,), seed=s)["nmi"] for s in range(5)]
f = []
for s in range(5):
    km = faiss.Kmeans(e.shape[1], k, niter=25, seed=123 + s); km.train(e); f.append(nmi(y, km.index.search(e, 1)[1][:, 0]))
sk = [nmi(y, KMeans(k, n_init=1, random_state=s).fit(e).labels_) for s in range(5)]
for name, v in (("rdml", r), ("faiss", f), ("sklearn k-means++", sk)):
    print(f"{name}: {np.mean(v):.4f} ± {np.std(v, ddof=1):.4f}  [{', '.join(f'{x:.4f}' for x in v)}]")
