"""One rank of python/tests/test_ranks.py, run by `torchrun --nproc_per_node 2` (gloo, CPU): the
scoring calls on every rank of the default process group, each rank in its own working folder
(OUT/r<rank>, so that a relative out= tells which rank wrote); what each returned, the rows its
model was asked for and how long it took, or the error it raised, saved as OUT/rank<rank>.json."""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdml  # noqa: E402
from test_ranks import CALLS, RUN_CALLS, Counted, bn_model, data, tiny  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
root = Path(os.environ["OUT"])
(root / f"r{rank}").mkdir()
os.chdir(root / f"r{rank}")
said = {}


def attempt(name, f, model=None):
    """`f()`'s value, the rows `model` was asked for and the seconds, or the error raised."""
    if model is not None:
        model.rows = 0
    t0 = time.perf_counter()
    try:
        said[name] = dict(value=f(), rows=getattr(model, "rows", None))
    except Exception as e:  # noqa: BLE001 - what each rank raised is the test's subject
        said[name] = dict(error=type(e).__name__, text=str(e))
    said[name]["seconds"] = time.perf_counter() - t0


model = Counted(tiny())
for name, call in CALLS.items():
    attempt(name, lambda: call(model), model)
# Progress on rank 0 alone: the ranks' `quiet` may differ.
run = rdml.open(os.environ["RUN"], quiet=rank != 0)
for name, call in RUN_CALLS.items():
    attempt(name, lambda: call(run))

# One rank's model raising inside the work: both raise, the other naming it.
failing = Counted(tiny(), fail_on_rank=1, fail_after=3)
attempt("model_raises", lambda: CALLS["robustness"](failing), failing)
# One rank's input refused before its call reaches the library.
x, y = data()
attempt("bad_input", lambda: rdml.embed(model, x if rank == 0 else x[:, :, :1, :1].squeeze(), batch=8))
# Ranks given other images: named, with the way out.
attempt("other_images", lambda: rdml.embed(model, x if rank == 0 else x[::-1].copy(), batch=8))
# Ranks asked different things.
attempt("other_seed", lambda: rdml.attack(model, x[:12], y[:12], "CA+", queries=12, batch=4, seed=rank, quiet=True))
# Batch-norm statistics that differ between the ranks: refused; broadcast rank 0's, then scored.
bn = bn_model(rank)
attempt("bn_differs", lambda: rdml.embed(bn, x, batch=8))
for b in bn.buffers():
    dist.broadcast(b, 0)
attempt("bn_broadcast", lambda: rdml.embed(bn, x, batch=8).tolist())
# A DDP-wrapped model (batch norm: DDP broadcasts its buffers at each forward) is scored through
# its module, so that DDP's collectives do not meet rdml's.
ddp = torch.nn.parallel.DistributedDataParallel(bn)
attempt("ddp_wrapped", lambda: rdml.attack(ddp, x[:16], y[:16], "ES", queries=16, batch=4, quiet=True)["scores"])
# A warning (a gallery holding the queries' own images): told by rank 0 alone.
attempt("warned", lambda: rdml.attack(model, x[:12], y[:12], "CA+", gallery=x[:24], gallery_labels=y[:24], queries=12,
                                      batch=4, quiet=True))
# A gathered loss whose ranks' embeddings differ in width: refused on both, not aborted in gloo.
attempt("loss_widths", lambda: float(rdml.Loss(gather=True)(torch.nn.functional.normalize(
    torch.randn(8, 16 if rank == 0 else 8, requires_grad=True), dim=1), torch.arange(8) % 4)))
# The group is still whole after every refusal: one more split call.
attempt("after", lambda: CALLS["embed"](model), model)
# A rank that is not asked: rank 0 waits at most group_timeout.
if rank == 0:
    attempt("alone_asked", lambda: rdml.embed(model, x, batch=8, group_timeout=2))
else:
    time.sleep(4)
(root / f"rank{rank}.json").write_text(json.dumps(said))
os._exit(0)  # rank 0's unanswered exchange would keep the group from closing
