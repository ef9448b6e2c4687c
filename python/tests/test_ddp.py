"""rdml's defenses and losses under torch.distributed (`torchrun --nproc_per_node 2`, gloo on the
CPU; python/tests/ddp_worker.py is each rank): a defended step's averaged gradient is the mean
of the single-process steps on each rank's half of the batch (each rank perturbs and mines its
own, robrank's behaviour); a gathered loss's gradient is the single-process loss's on the whole
batch; the model's modes, flags and batch-norm statistics are as documented after each step; a
defense's memory (HM's LGA) is each rank's own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import rdml  # noqa: E402

DEFENSE = dict(kind="act", eps=0.1, step=0.02, steps=4, seed=3)
LOSS = dict(kind="triplet", miner="semihard", seed=5)
HM = dict(eps=0.1, step=0.02, steps=4, source="random", destination="lga", ics=0.5)


def tiny():
    """A small CNN (no batch norm), the same weights in every process."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 16), Normalize())


class Normalize(nn.Module):
    def forward(self, x):
        return nn.functional.normalize(x, dim=1)


def grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


def close(a, b, tol=1e-5):
    for k in b:
        scale = max(float(b[k].abs().max()), 1e-12)
        assert float((a[k] - b[k]).abs().max()) <= tol * scale, (k, float((a[k] - b[k]).abs().max()), scale)


def test_a_defended_step_and_a_gathered_loss_under_ddp(tmp_path):
    from test_loop import spc2

    here = Path(__file__).resolve().parent
    env = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
           str(here / "ddp_worker.py")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{k}.pt") for k in range(2)]
    x, y = spc2()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    n = len(y) // 2
    # The mean of single-process defended steps on each half, each with the defense's seed.
    model = tiny()
    halves = [grads(model, rdml.Defense(**DEFENSE)(model, xt[k * n:(k + 1) * n], yt[k * n:(k + 1) * n]))
              for k in range(2)]
    mean = {k: (halves[0][k] + halves[1][k]) / 2 for k in halves[0]}
    for r in ranks:
        close(r["defense"], mean)
    # The gathered loss: the single-process loss of the whole batch.
    whole = grads(model, rdml.Loss(**LOSS)(model(xt), yt))
    for r in ranks:
        close(r["gathered"], whole)
    # Batch norm: the inner maximisation ran in eval mode and left the statistics to the outer
    # forward; modes and flags as they were.
    for r in ranks:
        assert r["bn_inner_modes"] and not any(r["bn_inner_modes"])
        assert r["bn_outer_saw_before"] and r["bn_after"]
    # A defense's memory is per rank: HM's LGA after two steps on each rank's half is the single
    # process's after two steps on that half (from the weights DDP left after the first step).
    assert ranks[0]["hm_state"]["prev_loss"] != ranks[1]["hm_state"]["prev_loss"]
    for k, r in enumerate(ranks):
        alone = rdml.Defense("hm", seed=7, **HM)
        for _ in range(2):
            alone(model, xt[k * n:(k + 1) * n], yt[k * n:(k + 1) * n]).backward()
        assert r["hm_state"]["steps_done"] == 2
        assert r["hm_state"]["prev_loss"] == pytest.approx(alone.state_dict()["state"]["prev_loss"], rel=1e-5)


def test_the_readme_ddp_example_runs_under_torchrun():
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29518",
           str(root / "python" / "examples" / "ddp_harden.py"), "--steps", "3", "--pairs", "8", "--queries", "8"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    import re

    assert re.search(r"2 ranks, 3 steps: loss \d+\.\d+, ERS \d+\.\d", r.stdout), r.stdout
