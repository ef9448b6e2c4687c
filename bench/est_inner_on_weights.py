"""On trained weights (an rdml run's model.safetensors, C2F2), robrank's `AdvRank.embShift` against
`rdml.Defense("est")`'s inner maximisation on the same SPC-2 batches (issue 54): the mean shift
‖f(x̃) − f(x)‖ each reaches, the triplet loss of the shifted batch on the same triplets, the ℓ∞
size and the share of pixels both left alike. One JSON line per batch, then their mean.

    PYTHONPATH=python ~/.cache/rdml/robrank/venv/bin/python bench/est_inner_on_weights.py \
        ROBRANK_CHECKOUT FASHION_MNIST_DIR RUN/model.safetensors [BATCHES]"""
import gzip, json, struct, sys
import numpy as np
import torch as th
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import robrank as rr
from robrank.attacks import AdvRank
import rdml
th.set_num_threads(2)
fm, weights = sys.argv[2], sys.argv[3]

from pathlib import Path

from harden_own_model import idx  # noqa: E402  (bench/, the script's own folder)
from rc2f2 import rc2f2  # noqa: E402

xtr = idx(Path(fm) / "train-images-idx3-ubyte.gz").astype(np.float32) / 255
ytr = idx(Path(fm) / "train-labels-idx1-ubyte.gz").astype(np.int64)

class L2(th.nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m; self.seen = None
    def forward(self, x):
        if self.training:
            self.seen = x.detach().clone()
        return F.normalize(self.m(x.view(-1, 1, 28, 28)), dim=-1)

net = rc2f2()
b = open(weights, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
def t(k):
    v = h[k]; s, e = v["data_offsets"]
    return th.from_numpy(np.frombuffer(b[8 + n + s:8 + n + e], np.float32).reshape(v["shape"]).copy())
p = "backbone.C2f2."
sd = {"0.weight": t(p + "conv1.weight"), "0.bias": t(p + "conv1.bias"), "3.weight": t(p + "conv2.weight"),
      "3.bias": t(p + "conv2.bias"), "7.weight": t(p + "fc1.weight").T.contiguous(), "7.bias": t(p + "fc1.bias"),
      "9.weight": t(p + "fc2.weight").T.contiguous(), "9.bias": t(p + "fc2.bias")}
net.load_state_dict(sd)
model = L2(net)
defense = rdml.Defense("est", eps=77 / 255, step=3 / 255, steps=8,
                       loss=dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2))
rng = np.random.default_rng(1)
by_class = [np.flatnonzero(ytr == c) for c in range(10)]
rows = []
for k in range(int(sys.argv[4]) if len(sys.argv) > 4 else 4):
    cls = rng.integers(0, 10, 128)
    items = np.array([rng.choice(by_class[c], 2, replace=False) for c in cls]).reshape(-1)
    x = th.from_numpy(xtr[items]).view(-1, 1, 28, 28); y = th.from_numpy(ytr[items])
    model.eval()
    with th.no_grad():
        clean = model(x)
    adv_rr = AdvRank(model, eps=77 / 255, alpha=3 / 255, pgditer=8, device="cpu", metric="N", verbose=False).embShift(x)
    model.train()
    defense(model, x, y)
    adv_rd = model.seen
    model.eval()
    with th.no_grad():
        e_rr, e_rd = model(adv_rr), model(adv_rd)
    neg = th.tensor([rng.choice(np.flatnonzero(y.numpy() != y[2 * i].item())) for i in range(128)])
    a, pp = th.arange(0, 256, 2), th.arange(1, 256, 2)
    tl = lambda e: F.triplet_margin_loss(e[a], e[pp], e[neg], margin=0.2).item()
    row = dict(shift_rr=(e_rr - clean).norm(dim=1).mean().item(), shift_rd=(e_rd - clean).norm(dim=1).mean().item(),
               loss_rr=tl(e_rr), loss_rd=tl(e_rd), loss_clean=tl(clean),
               linf_rr=(adv_rr - x).abs().amax().item(), linf_rd=(adv_rd - x).abs().amax().item(),
               same=((adv_rr - adv_rd).abs() < 1e-6).float().mean().item())
    rows.append(row); print(json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
print("mean", json.dumps({k: round(float(np.mean([r[k] for r in rows])), 4) for k in rows[0]}))
