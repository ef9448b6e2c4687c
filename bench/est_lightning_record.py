"""robrank's Lightning EST run with rdml's step (bench/est_lightning.sh rdml's), writing every
batch it draws (images as k/255 bytes, labels, the step's loss) to bNNN.pt in the working folder,
and the weights before steps 0, 1, 50, 100, 200, 300, 400 and 468; bench/est_lightning_replay.py
then replays the run in a plain PyTorch loop (issue 54, bench/README "EST in robrank's own
harness"). It writes about 100 MB and robrank's logs_* into the working folder; run it in a folder
of its own, with robrank's venv (bench/robrank_env.sh makes it, and robrank's home):

    mkdir FOLDER && cd FOLDER && touch override_pgditer_8
    HOME=<robrank's home> PYTHONPATH=RDML/python <robrank's venv>/bin/python \
        RDML/bench/est_lightning_record.py ROBRANK_CHECKOUT RDML/bench
"""
import os, sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import torch as th
th.set_num_threads(1)
import robrank_torch_compat  # noqa
import robrank as rr
rr.configs.rc2f2.maxepoch = 2
import rdml
from rc2f2 import L2
state = {}
KEEP = {0, 1, 50, 100, 200, 300, 400, 468}
def step(model, batch, batch_idx, *, pgditer=None):
    if not state:
        state["d"] = rdml.Defense("est", eps=77 / 255, step=3 / 255, steps=8,
                                  loss=dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2), seed=0)
        state["m"] = L2(model.backbone)
    w = {k: v.detach().clone() for k, v in model.backbone.state_dict().items()} if batch_idx in KEEP else None
    x = batch[0].view(-1, 1, 28, 28)
    u8 = (x * 255).round().to(th.uint8)
    assert th.equal(u8 / 255.0, x), "images are not k/255"
    loss = state["d"](state["m"], x, batch[1].view(-1))
    model.log("Train/loss", loss)  # as robrank's step and bench/est_lightning.sh log it
    th.save(dict(u8=u8, y=batch[1].view(-1).clone(), loss=loss.item(), w=w), f"b{batch_idx:03d}.tmp")
    os.replace(f"b{batch_idx:03d}.tmp", f"b{batch_idx:03d}.pt")
    return loss
rr.defenses.est_training_step = step
rr.cmdline.Train(['-C', 'fashion:rc2f2d:ptripletN', '-g', '0'])
