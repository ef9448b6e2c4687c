"""The cost of crossing into PyTorch: robrank's suite on a PyTorch model through rdml's oracle
(`rdml.robustness(model, images, labels)`), against PyTorch's own forward and backward time for
the same steps, in the same run.

PyTorch's time is measured inside the calls rdml makes: each forward (`model(x)`) and each
backward (`torch.autograd.grad`) is timed, the device synchronised before and after. Everything
else of the suite's wall time is the crossing and rdml's own work (copies to and from the host,
the objectives, selections and projections): the overhead, as a fraction of PyTorch's time.

    python bench/oracle.py --arch c2f2 --size 28 --n 2000 --queries 128
    python bench/oracle.py --arch resnet18 --size 224 --n 256 --queries 32
    python bench/oracle.py --arch resnet50 --size 224 --n 1024 --queries 512 --device cuda --profile rob224

Needs torch and torchvision, and rdml's package (pip install ./python). Models are randomly
initialised (their batch norms calibrated on the images): the timing, not the scores, is the point.
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import rdml


def c2f2(dim):
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, dim))


class Timed(nn.Module):
    """The model, L2-normalised, its forward timed with the device synchronised."""

    def __init__(self, net, device):
        super().__init__()
        self.net, self.device, self.seconds, self.calls = net, device, 0.0, 0

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def forward(self, x):
        self.sync()
        t = time.perf_counter()
        e = F.normalize(self.net(x), dim=1)
        self.sync()
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return e


def timed_pull_back(timer):
    """TorchModel.pull_back with its autograd.grad timed (the device synchronised)."""
    grad = torch.autograd.grad

    def timed(*a, **k):
        timer.sync()
        t = time.perf_counter()
        out = grad(*a, **k)
        timer.sync()
        timer.backward += time.perf_counter() - t
        return out

    return timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="c2f2", choices=["c2f2", "resnet18", "resnet50"])
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=128)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--profile", default="rob28")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--json", help="write the result here too")
    a = ap.parse_args()
    torch.manual_seed(0)
    device = torch.device(a.device)
    channels = 1 if a.arch == "c2f2" else 3
    if a.arch == "c2f2":
        net = c2f2(64)
    else:
        import torchvision

        net = getattr(torchvision.models, a.arch)(weights=None, num_classes=512)
    # Class-dependent smooth images in [0, 1].
    rng = np.random.default_rng(0)
    labels = rng.integers(0, a.classes, a.n)
    means = rng.random((a.classes, channels, 1, 1), dtype=np.float32)
    x = np.clip(means[labels] + 0.15 * rng.standard_normal((a.n, channels, a.size, a.size), dtype=np.float32), 0, 1)
    net = net.to(device)
    with torch.no_grad():  # batch-norm statistics of these images
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = 1.0
        net.train()
        net(torch.from_numpy(x[: min(a.n, 64)]).to(device))
        net.eval()
    model = Timed(net, device)
    model.backward = 0.0
    torch_autograd_grad = torch.autograd.grad
    torch.autograd.grad = timed_pull_back(model)
    try:
        t0 = time.perf_counter()
        r = rdml.robustness(model, x, labels, profile=a.profile, queries=a.queries, batch=a.batch, quiet=True)
        wall = time.perf_counter() - t0
    finally:
        torch.autograd.grad = torch_autograd_grad
    inside = model.seconds + model.backward
    out = {
        "arch": a.arch, "size": a.size, "n": a.n, "queries": a.queries, "batch": a.batch, "profile": a.profile,
        "device": str(device), "torch_threads": torch.get_num_threads(),
        "wall_s": round(wall, 2), "torch_forward_s": round(model.seconds, 2), "torch_backward_s": round(model.backward, 2),
        "forward_calls": model.calls, "overhead_vs_torch": round((wall - inside) / inside, 3),
        "ers": round(r["table"]["ers"], 2),
    }
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
        out["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20)
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
