"""robrank's rob28 ERS suite, vectorised over each batch of queries, in PyTorch: the same nine
attacks, selections and scores as `rdml robustness` (see README), on the same C2F2 weights (read
from an rdml run folder), for a side-by-side timing.

Usage: python bench/torch_suite.py --run DIR --data FASHION_DIR [--queries 512] [--threads 2]
       python bench/torch_suite.py --arch resnet18 --synthetic 516 --profile rob224 --device cuda
(the second: the rob224 suite of `bench/gpu.sh` on the two-Gaussian 3x224x224 test set that
`data.dataset = "synthetic"` makes, with a randomly initialised ResNet-18 of `torch_gpu.py`: a
timing of the same workload, not the same numbers)
"""
import argparse, gzip, json, struct, time
import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch_epoch import C2F2, read_idx


def load_model(run):
    m = C2F2()
    f = safe_open(f"{run}/model.safetensors", "pt")
    sd = {}
    for k in f.keys():
        name = k.replace("backbone.C2f2.", "")
        t = f.get_tensor(k)
        sd[name] = t.t().contiguous() if name.startswith("fc") and name.endswith("weight") else t
    m.load_state_dict(sd)
    return m.eval()


def pgd(model, x, loss_fn, eps, alpha, steps, movable=None):
    x0 = x.clone()
    xa = x.clone()
    for _ in range(steps):
        xa.requires_grad_(True)
        loss = loss_fn(model(xa))
        (g,) = torch.autograd.grad(loss, xa)
        step = alpha * g.sign()
        if movable is not None:
            step = step * movable.view(-1, 1, 1, 1)
        xa = torch.min(torch.max(xa.detach() - step, x0 - eps), x0 + eps).clamp(0, 1)
    return xa.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run")
    ap.add_argument("--data")
    ap.add_argument("--queries", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--arch", default="c2f2", choices=["c2f2", "resnet18"])
    ap.add_argument("--synthetic", type=int, default=0, help="N two-Gaussian 3x224x224 test items")
    ap.add_argument("--profile", default="rob28", choices=["rob28", "rob224"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    g = torch.Generator().manual_seed(0)
    if a.synthetic:
        half = a.synthetic // 2
        Y = torch.cat([torch.zeros(half), torch.ones(a.synthetic - half)]).long()
        X = (0.25 + 0.5 * Y.float().view(-1, 1, 1, 1) + 0.025 * torch.randn(a.synthetic, 3, 224, 224, generator=g)).clamp(0, 1)
    else:
        X = torch.from_numpy(read_idx(f"{a.data}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
        Y = torch.from_numpy(read_idx(f"{a.data}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    if a.arch == "resnet18":
        from torch_gpu import ResNet18
        torch.manual_seed(0)
        model = ResNet18().eval()
    else:
        model = load_model(a.run)
    model = model.to(dev)
    X, Y = X.to(dev), Y.to(dev)
    for p in model.parameters():
        p.requires_grad_(False)
    t0 = time.perf_counter()
    with torch.no_grad():
        E = torch.cat([model(X[i:i + 250]) for i in range(0, len(X), 250)])
    N = len(E)
    top = max(int(0.01 * N), 1)
    eps, alpha, steps = (77 / 255 if a.profile == "rob28" else 8 / 255), 3 / 255, 32
    rand = lambda hi, n: torch.randint(0, hi, (n,), generator=g).to(dev)
    res, times = {}, {}

    def acc(k, v):
        res[k] = res.get(k, 0.0) + float(v)

    for s in range(0, a.queries, 128):
        idx = torch.arange(s, min(s + 128, a.queries), device=dev)
        x, q, y = X[idx], E[idx], Y[idx]
        d_all = torch.cdist(q, E)
        d_all[torch.arange(len(idx), device=dev), idx] = float("inf")
        nn = d_all.topk(top, largest=False).indices
        pick = nn[torch.arange(len(idx), device=dev), rand(top, len(idx))]
        rnd = rand(N, len(idx))
        t = time.perf_counter()
        # CA+/CA−: perturb candidates x toward/away from a query.
        for name, qi, sign in (("CA+", rnd, 1), ("CA-", pick, -1)):
            t = time.perf_counter()
            Q = E[qi]
            dxq = torch.cdist(Q, E)
            loss = lambda e: F.relu(sign * ((e - Q).norm(dim=1, keepdim=True) - dxq)).mean()
            ea = model(pgd(model, x, loss, eps, alpha, steps)).detach()
            acc(name, 100 * (dxq < (ea - Q).norm(dim=1, keepdim=True)).float().mean(1).sum())
            times[name] = times.get(name, 0) + time.perf_counter() - t
        for name, ci, sign in (("QA+", rnd, 1), ("QA-", pick, -1), ("GTT", nn[:, 0], -1)):
            t = time.perf_counter()
            C = E[ci]
            loss = lambda e: F.relu(sign * ((e - C).norm(dim=1, keepdim=True) - torch.cdist(e, E))).mean()
            ea = model(pgd(model, x, loss, eps, alpha, steps)).detach()
            d = torch.cdist(ea, E)
            if name == "GTT":
                d[torch.arange(len(idx), device=dev), idx] = float("inf")
                acc(name, 100 * (d.topk(4, largest=False).indices == ci.unsqueeze(1)).any(1).float().sum())
            else:
                acc(name, 100 * (d < d.gather(1, ci.unsqueeze(1))).float().mean(1).sum())
            times[name] = times.get(name, 0) + time.perf_counter() - t
        t = time.perf_counter()
        T = E[rnd]
        ea = model(pgd(model, x, lambda e: (1 - F.cosine_similarity(e, T)).mean(), eps, alpha, steps)).detach()
        acc("TMA", F.cosine_similarity(ea, T).sum())
        times["TMA"] = time.perf_counter() - t + times.get("TMA", 0)

        def r1(ea):
            d = torch.cdist(ea, E)
            d[torch.arange(len(idx), device=dev), idx] = float("inf")
            return 100 * (Y[d.argmin(1)] == y).float().sum()

        t = time.perf_counter()
        noise = ((torch.randint(0, 2, q.shape, generator=g) * 2 - 1) * 1e-7).to(dev)
        ea = model(pgd(model, x, lambda e: -(e - q - noise).norm(dim=1).mean(), eps, alpha, steps)).detach()
        acc("ES:D", (ea - q).norm(dim=1).sum()); acc("ES:R", r1(ea))
        times["ES"] = time.perf_counter() - t + times.get("ES", 0)
        t = time.perf_counter()
        same = (Y.unsqueeze(0) == y.unsqueeze(1)); same[torch.arange(len(idx), device=dev), idx] = False
        diff = ~(Y.unsqueeze(0) == y.unsqueeze(1))

        def ltm(e):
            d = torch.cdist(e, E)
            return F.relu(d.masked_fill(~diff, -1e9).max(1).values - d.masked_fill(~same, 1e9).min(1).values).sum()

        acc("LTM", r1(model(pgd(model, x, ltm, eps, alpha, steps)).detach()))
        times["LTM"] = time.perf_counter() - t + times.get("LTM", 0)
        t = time.perf_counter()
        top1 = Y[nn[:, 0]]
        dd = d_all.masked_fill(Y.unsqueeze(0) == top1.unsqueeze(1), float("inf"))
        Tg = E[dd.argmin(1)]
        acc("GTM", r1(model(pgd(model, x, lambda e: (e - Tg).norm(dim=1).mean(), eps, alpha, steps)).detach()))
        times["GTM"] = time.perf_counter() - t + times.get("GTM", 0)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    total = time.perf_counter() - t0
    out = {"framework": "pytorch " + torch.__version__, "device": str(dev), "queries": a.queries, "seconds": total,
           "per_attack_seconds": times, "raw": {k: v / a.queries for k, v in res.items()}}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
