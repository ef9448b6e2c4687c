"""EST's draws one at a time (issue 54, bench/README "EST in robrank's own harness"): one epoch of
rdml's EST step (seed 0) in the plain loop, Adam 1e-3 with weight decay 1e-7, 469 steps, with the
initial weights (INIT) of a run bench/est_lightning_record.py recorded in FOLDER (`lightning`) or
torch.manual_seed(0)'s (`seed0`), and that run's batches (BATCHES `lightning`) or the loop's
SAMPLER=robrank batches of seed 0 (`numpy0`, bench/est_step_loop.py's). Scored as
bench/est_step_loop.py scores; one JSON line, also written to OUT. FASHION: the IDX files' folder
(default: where bench/robrank_env.sh puts them).

    PYTHONPATH=python:bench python bench/est_draws.py INIT BATCHES FOLDER OUT
"""
import os, sys, json, time, numpy as np, torch as th, torch.nn.functional as F
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import rdml
from harden_own_model import idx
from rc2f2 import L2, rc2f2
from pathlib import Path
th.set_num_threads(1)
init, batches, D, out = sys.argv[1:5]
assert init in ("lightning", "seed0") and batches in ("lightning", "numpy0"), "INIT: lightning|seed0; BATCHES: lightning|numpy0"
fm = Path(os.environ.get("FASHION", Path.home() / ".cache/rdml/robrank/fashion-mnist/usr/share/datasets/fashion-mnist"))
xtr = idx(fm / "train-images-idx3-ubyte.gz").astype(np.float32) / 255
ytr = idx(fm / "train-labels-idx1-ubyte.gz").astype(np.int64)
xte = idx(fm / "t10k-images-idx3-ubyte.gz").astype(np.float32) / 255
yte = idx(fm / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
th.manual_seed(0)
net = rc2f2()
if init == "lightning":
    net.load_state_dict(th.load(f"{D}/b000.pt", weights_only=False)["w"])
model = L2(net)
opt = th.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-7)
d = rdml.Defense("est", eps=77 / 255, step=3 / 255, steps=8,
                 loss=dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2), seed=0)
rng = np.random.default_rng(0)
by_class = [np.flatnonzero(ytr == c) for c in range(10)]
order = rng.permutation(len(ytr))
t0 = time.time()
for i in range(469):
    if batches == "lightning":
        b = th.load(f"{D}/b{i:03d}.pt", weights_only=False)
        x, y = (b["u8"] / 255.0).view(-1, 1, 28, 28), b["y"]
    else:
        anchors = order[i * 128:(i + 1) * 128]
        items = np.array([(a, rng.choice(by_class[ytr[a]])) for a in anchors]).reshape(-1)
        x, y = th.from_numpy(xtr[items]).view(-1, 1, 28, 28), th.from_numpy(ytr[items])
    model.train(); opt.zero_grad()
    loss = d(model, x, y); loss.backward(); opt.step()
    if i % 100 == 0:
        print(i, loss.item(), f"{time.time() - t0:.0f} s", flush=True)
model.eval()
te_x = th.from_numpy(xte).view(-1, 1, 28, 28)
r = rdml.robustness(model, te_x, yte, profile="rob28", robrank_compat=True, queries=256, batch=128, seed=0, quiet=True)
m = rdml.metrics(model(te_x).detach().numpy(), yte)
res = dict(init=init, batches=batches, ers=r["table"]["ers"], cols={row["column"]: row["raw"] for row in r["table"]["rows"]}, r1=m["recall@1"])
print(json.dumps(res)); json.dump(res, open(out, "w"))
