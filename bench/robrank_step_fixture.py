"""One ACT step and two HM steps by robrank's own code, for rdml to replay (issue 54).

    python bench/robrank_step_fixture.py ROBRANK_CHECKOUT OUT.npz

Run in robrank's venv (bench/robrank_crosscheck.sh makes it: pytorch-lightning 1.6.3, PyTorch
borrowed from rdml's Python venv). robrank's `rc2f2` backbone, its weights drawn by
`torch.manual_seed(0)` as `rc2f2` (bench/rc2f2.py) draws them (python/tests/test_loop.py draws the
same and checks the digest written here), takes an SPC-2 batch of 8 pairs of rdml's embedded
Fashion-MNIST test images. robrank's `pnp_training_step` (ACT, `fashion:rc2f2p:ptripletN`) and
`hm_training_step` (HM[S, g_LGA]&ICS, `fashion:rc2f2ghmetsmi:ptripletN`, called twice so that the
second step's LGA destination follows the first's loss) run at robrank's `override_pgditer_8`
budget (8 steps of 3/255 in 77/255). Written: the batch's items, the triplets robrank's miners
drew, the adversarial images each PGD ended with and the loss each step returned.
"""
import gzip
import hashlib
import random
import sys
from pathlib import Path

import numpy as np
import torch as th

src, out = sys.argv[1], Path(sys.argv[2])
sys.path.insert(0, src)
import robrank_torch_compat  # noqa: E402,F401  (robrank's ICS under PyTorch 2.x)
import robrank as rr  # noqa: E402
from robrank.defenses import amd, pnp  # noqa: E402
from rc2f2 import rc2f2  # noqa: E402  (bench/, the script's own folder)

ROOT = Path(__file__).resolve().parent.parent


def digest(module):
    h = hashlib.sha256()
    for k, v in module.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().numpy().astype("<f4").tobytes())
    return h.hexdigest()


# An SPC-2 batch: 8 pairs, the first two test images of each of 8 classes in turn.
d = ROOT / "data" / "fashion-mnist"
px = np.frombuffer(gzip.decompress((d / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
lb = np.frombuffer(gzip.decompress((d / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
items = np.array([i for c in range(8) for i in np.flatnonzero(lb == c)[:2]], np.int64)
images = th.from_numpy(px.reshape(-1, 1, 28, 28)[items].astype(np.float32) / 255)
labels = th.from_numpy(lb[items].astype(np.int64))

th.manual_seed(0)
weights = rc2f2().state_dict()


def robrank_model(module):
    model = module.Model(dataset="fashion", loss="ptripletN")
    model.backbone.load_state_dict(weights)
    model.config.advtrain_pgditer = 8  # robrank's override_pgditer_8
    model.log = lambda *a, **k: None  # outside a Lightning trainer
    return model


fixture = dict(items=items, weights_sha256=np.array(digest(robrank_model(rr.models.rc2f2p).backbone)))
random.seed(0)

# ACT: the triplets pnp's miner draws, the images pncollapse returns, the loss.
seen = {}
miner = pnp.miner
pnp.miner = lambda *a, **k: seen.setdefault("act_triplets", miner(*a, **k))
collapse = pnp.PositiveNegativePerplexing.pncollapse
pnp.PositiveNegativePerplexing.pncollapse = lambda self, *a, **k: seen.setdefault("act_adv", collapse(self, *a, **k))
act = robrank_model(rr.models.rc2f2p)
loss = pnp.pnp_training_step(act, (images, labels), 0)
fixture.update(act_triplets=np.stack([t.numpy() for t in seen["act_triplets"]]),
               act_adv=seen["act_adv"].numpy(), act_loss=np.float32(loss.item()))

# HM[S, g_LGA]&ICS, two steps: the source triplets and images HardnessManipulate returns.
manipulate = amd.MadryInnerMax.HardnessManipulate
hm = robrank_model(rr.models.rc2f2)
for k in range(2):
    got = {}

    def capture(self, *a, **kw):
        got["r"] = manipulate(self, *a, **kw)
        return got["r"]

    amd.MadryInnerMax.HardnessManipulate = capture
    prev = getattr(hm, "_hm_prev_loss", 2.0)
    loss = amd.hm_training_step(hm, (images, labels), k, srch="spc2-softhard", desth="spc2-semihard", hm="ET",
                                gradual=True, ics=True)
    adv, triplets = got["r"]
    fixture.update({f"hm{k}_triplets": np.stack([t.numpy() for t in triplets]), f"hm{k}_adv": adv.numpy(),
                    f"hm{k}_loss": np.float32(loss.item()), f"hm{k}_prev_loss": np.float32(prev)})

tmp = out.with_name(out.name + ".tmp.npz")
np.savez_compressed(tmp, **fixture)
tmp.replace(out)
print({k: (v.shape if v.ndim else v.item()) for k, v in fixture.items()})
