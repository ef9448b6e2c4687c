"""The embeddings bench/metrics_pml.py and bench/kmeans_faiss.py score: N unit vectors of C classes
(N/C each) in D dimensions, class centres on the sphere plus Gaussian noise of norm 2.4, seed 0."""
import numpy as np


def sphere_embeddings(n, c, d):
    """(embeddings float32 [n // c * c, d], labels)."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((c, d)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = np.repeat(np.arange(c), n // c)
    x = centres[labels] + rng.standard_normal((len(labels), d)).astype(np.float32) * (2.4 / d ** 0.5)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, labels
