"""EST in one PyTorch loop, two step functions (issue 54): robrank's own (`AdvRank.embShift` at
its override_pgditer_8 budget, then `ptripletN` on the shifted batch) or `rdml.Defense("est")`;
the same rc2f2 initial weights (torch.manual_seed(SEED)), the same SPC-2 batches from numpy's SEED
stream, Adam 1e-3 with weight decay 1e-7. The batches: 128 pairs of a random class and two of its
items each, or with SAMPLER=robrank as robrank's Lightning run draws them (its MNISTPairDataset
under a shuffling DataLoader): every training item once per epoch as an anchor, in a random order,
128 a batch (the last 96), each followed by any item of its class (`random.choice`, itself
included). The model is then scored by `rdml.robustness` (rob28, robrank_compat) on the first 256 test
items; one JSON line, also written to OUT (default /tmp/rbest/loop-WHICH-SEED.json).

    PYTHONPATH=python ~/.cache/rdml/robrank/venv/bin/python bench/est_step_loop.py \
        ROBRANK_CHECKOUT robrank|rdml SEED BATCHES FASHION_MNIST_DIR [THREADS] [OUT]

(robrank's venv, which bench/robrank_env.sh makes, with rdml's package on PYTHONPATH.)"""
import gzip, json, os, sys, time
import numpy as np
import torch as th
sys.path.insert(0, sys.argv[1])
import robrank as rr
from robrank.attacks import AdvRank
import rdml

which, seed, batches = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
th.set_num_threads(int(sys.argv[6]) if len(sys.argv) > 6 else 2)
fm = sys.argv[5]

from pathlib import Path

from harden_own_model import idx  # noqa: E402  (bench/, the script's own folder)
from rc2f2 import L2, rc2f2  # noqa: E402

xtr = idx(Path(fm) / "train-images-idx3-ubyte.gz").astype(np.float32) / 255
ytr = idx(Path(fm) / "train-labels-idx1-ubyte.gz").astype(np.int64)
xte = idx(Path(fm) / "t10k-images-idx3-ubyte.gz").astype(np.float32) / 255
yte = idx(Path(fm) / "t10k-labels-idx1-ubyte.gz").astype(np.int64)

th.manual_seed(seed)
net = rc2f2()
model = L2(net)
opt = th.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-7)
rng = np.random.default_rng(seed)
by_class = [np.flatnonzero(ytr == c) for c in range(10)]
ptriplet = rr.losses.ptripletN()
defense = rdml.Defense("est", eps=77 / 255, step=3 / 255, steps=8,
                       loss=dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2),
                       seed=seed) if which == "rdml" else None
robrank_sampler = os.environ.get("SAMPLER", "classes") == "robrank"
assert os.environ.get("SAMPLER", "classes") in ("classes", "robrank"), "SAMPLER: classes or robrank"
per_epoch = -(-len(ytr) // 128)  # robrank's DataLoader keeps the last, short batch


def batch_items(b, order):
    """The items of batch `b`, anchor then positive; `order` the epoch's anchors (robrank's)."""
    if robrank_sampler:
        anchors = order[(b % per_epoch) * 128:(b % per_epoch + 1) * 128]
        return np.array([(a, rng.choice(by_class[ytr[a]])) for a in anchors]).reshape(-1)
    cls = rng.integers(0, 10, 128)
    return np.array([rng.choice(by_class[c], 2, replace=False) for c in cls]).reshape(-1)


t0 = time.time(); losses = []; order = None
for b in range(batches):
    if robrank_sampler and b % per_epoch == 0:
        order = rng.permutation(len(ytr))
    items = batch_items(b, order)
    x = th.from_numpy(xtr[items]).view(-1, 1, 28, 28); y = th.from_numpy(ytr[items])
    opt.zero_grad()
    if which == "robrank":
        model.eval()
        adv = AdvRank(model, eps=77 / 255, alpha=3 / 255, pgditer=8, device="cpu", metric="N",
                      verbose=False).embShift(x)
        model.train()
        loss = ptriplet(model(adv), y)
    else:
        loss = defense(model, x, y)
    loss.backward(); opt.step(); losses.append(loss.item())
    if b % 50 == 0:
        print(which, b, np.mean(losses[-50:]), f"{time.time() - t0:.0f} s", flush=True)
train_s = time.time() - t0
model.eval()
te_x = th.from_numpy(xte).view(-1, 1, 28, 28)
r = rdml.robustness(model, te_x, yte, profile="rob28", robrank_compat=True, queries=256, batch=128, seed=0, quiet=True)
m = rdml.metrics(model(te_x).detach().numpy(), yte) if hasattr(rdml, "metrics") else {}
out = dict(which=which, seed=seed, batches=batches, sampler="robrank" if robrank_sampler else "classes", train_s=train_s, mean_loss=float(np.mean(losses)),
           ers=r["table"]["ers"], cols={row["column"]: row["raw"] for row in r["table"]["rows"]},
           r1=m.get("recall@1") if isinstance(m, dict) else None)
print(json.dumps(out), flush=True)
json.dump(out, open(sys.argv[7] if len(sys.argv) > 7 else f"/tmp/rbest/loop-{which}-{seed}.json", "w"))
