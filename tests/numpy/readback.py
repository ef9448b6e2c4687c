#!/usr/bin/env python3
"""`rdml embed` read back by NumPy: trains a small run, exports its test embeddings as .npz, .npy
and .safetensors, loads each with NumPy (numpy.load; safetensors by its documented layout: an
8-byte header length, a JSON header, little-endian data), checks the three agree, and recomputes
Recall@k and MAP@R from the exported embeddings to compare them with `rdml eval --json`.

Usage: python3 tests/numpy/readback.py [RDML_BINARY]   (default target/release/rdml)
Prints 'N passed, N failed' and exits non-zero on a failure.
"""
import json
import zlib
import os
import subprocess
import sys
import tempfile

import numpy as np

RDML = sys.argv[1] if len(sys.argv) > 1 else "target/release/rdml"
checks = []


def check(name, ok, detail=""):
    checks.append(ok)
    print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail else ""))


def rdml(*args):
    return subprocess.run([RDML, "--quiet", *args], check=True, capture_output=True, text=True).stdout


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    types = {"F32": "<f4", "I64": "<i8", "U8": "u1"}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=types[v["dtype"]]).reshape(v["shape"])
    return out, header.get("__metadata__", {})


def metrics(emb, labels, ks):
    """Recall@k and MAP@R of every item against the others, ties by (distance, index) as rdml."""
    e = emb.astype(np.float64)
    sq = (e * e).sum(1)
    d = sq[:, None] + sq[None, :] - 2 * e @ e.T
    np.fill_diagonal(d, np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(len(e)), d.shape), d), axis=1)
    same = labels[order] == labels[:, None]
    r = (labels[None, :] == labels[:, None]).sum(1) - 1
    keep = r > 0
    recall = {k: same[keep, :k].any(1).mean() for k in ks}
    aps = []
    for i in np.flatnonzero(keep):
        rel = same[i, : r[i]]
        prec = np.cumsum(rel) / np.arange(1, r[i] + 1)
        aps.append((prec * rel).sum() / r[i])
    return recall, float(np.mean(aps))


with tempfile.TemporaryDirectory() as tmp:
    run = os.path.join(tmp, "run")
    rdml("train", "--config", "fashion-c2f2-triplet", "--out", run, "--epochs", "1", "--max-batches", "30",
         "--set", 'data.dataset="fashion-mnist-embedded"', "--set", "eval.nmi=false")
    ev = json.loads(rdml("eval", "--model", run, "--json"))
    paths = {ext: os.path.join(tmp, "emb." + ext) for ext in ["npz", "npy", "safetensors"]}
    for p in paths.values():
        rdml("embed", "--model", run, "--out", p)

    z = np.load(paths["npz"])
    stem = paths["npy"][: -len(".npy")]
    y = {"embeddings": np.load(paths["npy"])}
    for k in ["labels", "ids", "split"]:
        y[k] = np.load(f"{stem}.{k}.npy")
    s, meta = read_safetensors(paths["safetensors"])

    emb, labels = z["embeddings"], z["labels"]
    check("npz arrays and shapes",
          emb.dtype == np.float32 and emb.ndim == 2 and labels.shape == (emb.shape[0],)
          and (z["ids"] == np.arange(emb.shape[0])).all() and (z["split"] == 1).all(),
          f"embeddings {emb.shape} {emb.dtype}, labels {labels.shape}")
    check("npy equals npz", all(np.array_equal(y[k], z[k]) for k in y))
    # The set's manifest, checked as a NumPy user would (zlib's CRC-32): the four files are
    # the set rdml wrote, whole.
    manifest = json.load(open(f"{stem}.set.json"))
    members = [(os.path.join(tmp, m["file"]), m) for m in manifest["members"]]
    check("npy set matches its manifest",
          len(members) == 4 and all(os.path.getsize(p) == m["bytes"]
                                    and f"{zlib.crc32(open(p, 'rb').read()):08x}" == m["crc32"] for p, m in members),
          f"{[m['file'] for _, m in members]}")
    check("safetensors equals npz", all(np.array_equal(s[k], z[k]) for k in s) and len(s) == 4,
          f"metadata {meta}")
    check("item count is eval's", emb.shape[0] == ev["queries"] + ev["lone_queries"] or emb.shape[0] == ev["queries"],
          f"{emb.shape[0]} rows, eval {ev['queries']} queries")

    ks = sorted(int(k.split("@")[1]) for k in ev if k.startswith("recall@"))
    recall, map_r = metrics(emb, labels, ks)
    n = ev["queries"]
    for k in ks:
        # Exact up to one query whose neighbours tie within float rounding.
        check(f"recall@{k} recomputed", abs(recall[k] - ev[f"recall@{k}"]) <= 1.0 / n + 1e-9,
              f"NumPy {recall[k]:.6f}, rdml eval {ev[f'recall@{k}']:.6f}")
    check("map@r recomputed", abs(map_r - ev["map@r"]) <= 1.0 / n + 1e-9,
          f"NumPy {map_r:.6f}, rdml eval {ev['map@r']:.6f}")

passed = sum(checks)
print(f"numpy readback: {passed} passed, {len(checks) - passed} failed")
sys.exit(0 if passed == len(checks) else 1)
