"""Replays a run bench/est_lightning_record.py wrote (FOLDER: its working folder) in a plain
PyTorch loop: its initial weights, its batches, a fresh Adam(1e-3, weight_decay=1e-7) and a fresh
rdml.Defense("est", seed=0). It compares the loss at every step (printing every 50th, any that
differs by more than 1e-6, and the worst difference), the weights where the run kept them (before
8 steps), then the final weights against its Lightning checkpoint; it follows a run still
recording, and gives up after 10 minutes without a new batch. (2026-11-28: losses equal at all 469
steps, weights equal at the 8 kept steps and at the end.)

    PYTHONPATH=python python bench/est_lightning_replay.py FOLDER
"""
import sys, os, time, glob, torch as th, torch.nn.functional as F
import rdml
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rc2f2 import L2, rc2f2  # noqa: E402
th.set_num_threads(1)
D = sys.argv[1]
def get(i):
    p, waited = f"{D}/b{i:03d}.pt", 0
    while not os.path.exists(p):
        if waited > 600:
            sys.exit(f"{p}: not written after 10 minutes; is the recording still running?")
        time.sleep(2); waited += 2
    return th.load(p, weights_only=False)
net = rc2f2()
b = get(0)
net.load_state_dict(b["w"])
model = L2(net)
opt = th.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-7)
d = rdml.Defense("est", eps=77 / 255, step=3 / 255, steps=8,
                 loss=dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2), seed=0)
worst = 0.0
for i in range(469):
    b = get(i)
    if b["w"] is not None:
        diff = max((net.state_dict()[k] - b["w"][k]).abs().max().item() for k in b["w"])
        print(f"before step {i}: weights max|diff| {diff:.3e}", flush=True)
    model.train(); opt.zero_grad()
    loss = d(model, (b["u8"] / 255.0).view(-1, 1, 28, 28), b["y"])
    loss.backward(); opt.step()
    worst = max(worst, abs(loss.item() - b["loss"]))
    if i % 50 == 0 or abs(loss.item() - b["loss"]) > 1e-6:
        print(f"step {i}: loss {loss.item():.7f} lightning {b['loss']:.7f} (worst |diff| so far {worst:.2e})", flush=True)
waited = 0
while not glob.glob(f"{D}/logs_*/lightning_logs/version_0/checkpoints/*.ckpt"):
    if waited > 600:
        sys.exit(f"{D}: no Lightning checkpoint after 10 minutes")
    time.sleep(5); waited += 5
time.sleep(5)
ck = th.load(glob.glob(f"{D}/logs_*/lightning_logs/version_0/checkpoints/*.ckpt")[0], weights_only=False)["state_dict"]
diff = max((net.state_dict()[k[9:]] - v).abs().max().item() for k, v in ck.items() if k.startswith("backbone."))
print(f"after 469 steps, against the Lightning checkpoint: weights max|diff| {diff:.3e}; worst loss |diff| {worst:.2e}", flush=True)
th.save(net.state_dict(), f"{D}/replayed.pt")
