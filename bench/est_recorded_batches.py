"""The batches a recorded Lightning EST run drew (bench/est_lightning_record.py's FOLDER), held
against the training set (issue 54, bench/README "EST in robrank's own harness"): each image found
among the training rows with its label, every training item an anchor once in the epoch, and how
the positives are spread (distinct positives against a uniform draw within the class; anchors
drawn as their own positive). FASHION: the IDX files' folder (default: where
bench/robrank_env.sh puts them).

    python bench/est_recorded_batches.py FOLDER
"""
import collections
import os
import sys
from pathlib import Path

import numpy as np
import torch as th

from harden_own_model import idx

if len(sys.argv) != 2:
    sys.exit("usage: est_recorded_batches.py FOLDER")
folder = Path(sys.argv[1])
fm = Path(os.environ.get("FASHION", Path.home() / ".cache/rdml/robrank/fashion-mnist/usr/share/datasets/fashion-mnist"))
xtr = idx(fm / "train-images-idx3-ubyte.gz")
ytr = idx(fm / "train-labels-idx1-ubyte.gz")
rows_of = collections.defaultdict(list)
for i, im in enumerate(xtr):
    rows_of[im.tobytes()].append(i)
files = sorted(folder.glob("b[0-9][0-9][0-9].pt"))
if not files:
    sys.exit(f"{folder}: no bNNN.pt batches (bench/est_lightning_record.py writes them)")
anchors, positives, sizes = [], [], collections.Counter()
for f in files:
    b = th.load(f, weights_only=False)
    u8, y = b["u8"].view(-1, 28, 28).numpy(), b["y"].numpy()
    sizes[len(y)] += 1
    rows = []
    for im, label in zip(u8, y):
        found = [r for r in rows_of.get(im.tobytes(), []) if ytr[r] == label]
        if not found:
            sys.exit(f"{f}: an image with label {label} is not a training row")
        rows.append(found[0])  # a duplicated image: its first row
    anchors += rows[0::2]
    positives += rows[1::2]
A, P = np.array(anchors), np.array(positives)
counts = np.bincount(ytr, minlength=10)
# A uniform draw within the class: item i of class c is missed by all n_c draws with (1 − 1/n_c)^n_c.
expected = sum(n * (1 - (1 - 1 / n) ** n) for n in counts if n)
print(f"{len(files)} batches, sizes {dict(sizes)}")
print(f"anchors {len(A)}, distinct {len(set(A.tolist()))} (training items {len(ytr)})")
print(f"pairs whose positive has the anchor's label: {int((ytr[A] == ytr[P]).sum())} of {len(A)}")
print(f"distinct positives {len(set(P.tolist()))}, a uniform draw within the class expects {expected:.0f}")
print(f"anchors that are their own positive {int((A == P).sum())}, a uniform draw expects {sum(1 / counts[ytr[A]]):.1f}")
