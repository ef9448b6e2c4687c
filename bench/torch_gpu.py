"""The PyTorch side of `bench/gpu.sh`: the same training-step workloads as `rdml bench-step` runs there
on a CUDA device (or any torch device), mean wall time of STEPS steps after one warm-up step,
synchronised at both ends; and one epoch of `fashion-c2f2-triplet` as `torch_epoch.py` runs it.

- c2f2-act: ACT on C2F2 (p and n pushed toward each other, anchor clean), one SPC-2 batch of 128
  pairs, 32 sign steps of 3/255 in the 77/255 L-inf ball, model in eval mode during the attack,
  triplet loss (margin 0.2, random negatives), Adam 1e-3;
- resnet18: a ResNet-18 (torchvision's layout, written out here: no torchvision needed) with a
  512-d L2-normalised embedding head and ImageNet normalisation inside, batch 112 (56 pairs) of
  random 3x224x224 images, triplet loss, Adam;
- resnet18-act: the same with ACT at 32 steps of 1/255 in the 8/255 ball;
- epoch: one epoch (469 batches) of C2F2 + triplet on Fashion-MNIST from --data.

Usage: python bench/torch_gpu.py --workloads c2f2-act,resnet18,resnet18-act[,epoch]
       [--device cuda] [--steps 5] [--data FASHION_DIR] [--json OUT]
"""
import argparse, json, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_epoch import C2F2, read_idx


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, emb=512):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, emb)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, x):
        x = (x - self.mean) / self.std
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.normalize(self.fc(x), dim=1)


def d(a, b):
    return (a - b).pow(2).sum(1).add(1e-12).sqrt()


def act_pgd(model, x3, t, eps, step, steps):
    """ACT's inner maximisation: minimise d(p, n) over p and n, the anchors clean."""
    model.eval()
    m = torch.zeros(len(x3), 1, 1, 1, device=x3.device)
    m[t:] = 1
    x0, xa = x3.clone(), x3.clone()
    for _ in range(steps):
        xa.requires_grad_(True)
        e = model(xa)
        loss = d(e[t:2 * t], e[2 * t:]).mean()
        (g,) = torch.autograd.grad(loss, xa)
        with torch.no_grad():
            xa = torch.min(torch.max(xa - step * g.sign() * m, x0 - eps), x0 + eps).clamp(0, 1)
    model.train()
    return xa.detach()


def make_step(model, opt, x, y, rng, attack):
    dev = x.device
    anc = np.arange(0, len(y), 2)
    neg = np.array([rng.choice(np.nonzero(y != y[i])[0]) for i in anc])
    t = len(anc)
    idx = torch.from_numpy(np.concatenate([anc, anc + 1, neg])).to(dev)

    def step():
        x3 = x[idx]
        if attack is not None:
            x3 = act_pgd(model, x3, t, *attack)
        e = model(x3)
        loss = F.relu(d(e[:t], e[t:2 * t]) - d(e[:t], e[2 * t:]) + 0.2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()  # waits for the device, as rdml's step reads its loss

    return step


def timed(step, steps, dev):
    step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def epoch(model, dev, data):
    rng = np.random.default_rng(0)
    x = read_idx(f"{data}/train-images-idx3-ubyte.gz")
    y = read_idx(f"{data}/train-labels-idx1-ubyte.gz").astype(np.int64)
    by_class = {c: np.nonzero(y == c)[0] for c in np.unique(y)}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-7)
    order = rng.permutation(len(y))
    t0 = time.perf_counter()
    for s in range(0, len(order), 128):
        b = order[s:s + 128]
        pos = np.array([rng.choice(by_class[y[i]][by_class[y[i]] != i]) for i in b])
        idx = np.stack([b, pos], 1).reshape(-1)
        xb = torch.from_numpy(x[idx].astype(np.float32) / 255.0).to(dev)
        yb = y[idx]
        emb = model(xb)
        anc = np.arange(0, len(idx), 2)
        neg = torch.from_numpy(np.array([rng.choice(np.nonzero(yb != yb[i])[0]) for i in anc])).to(dev)
        a = torch.from_numpy(anc).to(dev)
        loss = F.triplet_margin_loss(emb[a], emb[a + 1], emb[neg], margin=0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="c2f2-act,resnet18,resnet18-act")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--data")
    ap.add_argument("--json")
    ap.add_argument("--tf32", choices=["default", "on", "off"], default="default",
                    help="default: PyTorch's own (TF32 convolutions through cuDNN, FP32 matmuls); "
                         "on: TF32 for matmuls too; off: neither")
    a = ap.parse_args()
    if a.tf32 != "default":
        torch.backends.cuda.matmul.allow_tf32 = a.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
    dev = torch.device(a.device)
    out = {"framework": "pytorch " + torch.__version__, "device": str(dev), "seconds_per_step": {},
           "peak_allocated_mib": {}, "tf32": {"mode": a.tf32,
           "matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}}
    if dev.type == "cuda":
        out["device"] = torch.cuda.get_device_name(dev)
    for w in a.workloads.split(","):
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        if w == "epoch":
            out["epoch_seconds"] = epoch(C2F2().to(dev), dev, a.data)
        else:
            if w == "c2f2-act":
                model, pairs, shape, attack = C2F2(), 128, (1, 28, 28), (77 / 255, 3 / 255, 32)
            elif w in ("resnet18", "resnet18-act"):
                attack = (8 / 255, 1 / 255, 32) if w == "resnet18-act" else None
                model, pairs, shape = ResNet18(), 56, (3, 224, 224)
            else:
                raise SystemExit(f"unknown workload {w}")
            model = model.to(dev)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            x = torch.rand((2 * pairs,) + shape, generator=torch.Generator().manual_seed(7)).to(dev)
            y = np.repeat(np.arange(pairs), 2)
            out["seconds_per_step"][w] = timed(make_step(model, opt, x, y, rng, attack), a.steps, dev)
        if dev.type == "cuda":
            out["peak_allocated_mib"][w] = torch.cuda.max_memory_allocated(dev) / 2**20
        print(w, out["seconds_per_step"].get(w, out.get("epoch_seconds")), flush=True)
    print(json.dumps(out, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
