"""One rank of python/tests/test_ddp.py, run by `torchrun --nproc_per_node 2` (gloo, CPU): a
defended step through a DistributedDataParallel model on this rank's half of the batch, and a
gathered loss; each rank saves its gradients and what it saw of its model's state into OUT."""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdml  # noqa: E402
from test_ddp import DEFENSE, HM, LOSS, tiny  # noqa: E402
from test_loop import BnNet, bn_state, spc2  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x, y = spc2()
n = len(y) // world
xs, ys = torch.from_numpy(x[rank * n:(rank + 1) * n]), torch.from_numpy(y[rank * n:(rank + 1) * n])
out = {}

# A defended step: each rank perturbs and mines its own half; DDP averages the gradients.
model = tiny()
ddp = torch.nn.parallel.DistributedDataParallel(model)
defense = rdml.Defense(**DEFENSE)
defense(ddp, xs, ys).backward()
out["defense"] = {k: p.grad.clone() for k, p in model.named_parameters()}

# A gathered loss: the whole batch's loss on every rank, this rank's rows keeping their graph.
model.zero_grad(set_to_none=True)
loss_fn = rdml.Loss(**LOSS, gather=True)
loss_fn(ddp(xs), ys).backward()
out["gathered"] = {k: p.grad.clone() for k, p in model.named_parameters()}

# Batch norm under DDP: the inner maximisation (through ddp.module) leaves the statistics for the
# outer forward, which DDP's own forward syncs from rank 0.
torch.manual_seed(0)
bn = BnNet()
ddp_bn = torch.nn.parallel.DistributedDataParallel(bn)
seen = []
bn.register_forward_pre_hook(lambda m, a: seen.append((m.training, bn_state(m))))
before = bn_state(bn)
rdml.Defense(**DEFENSE)(ddp_bn, xs, ys).backward()
out["bn_inner_modes"] = [t for t, _ in seen[:-1]]
out["bn_outer_saw_before"] = seen[-1][0] and all(torch.equal(seen[-1][1][k], before[k]) for k in before)
out["bn_after"] = bn.training and all(p.requires_grad for p in bn.parameters())
# A defense's memory under DDP is the rank's own: HM's LGA remembers this rank's last
# adversarial loss (robrank's per-process module does the same).
hm = rdml.Defense("hm", seed=7, **HM)
for _ in range(2):
    hm(ddp, xs, ys).backward()
out["hm_state"] = hm.state_dict()["state"]
torch.save(out, os.path.join(os.environ["OUT"], f"rank{rank}.pt"))
dist.destroy_process_group()
