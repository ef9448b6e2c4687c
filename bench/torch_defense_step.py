"""One training step of each defense on robrank's Fashion-MNIST setting in PyTorch, for a
side-by-side timing with `bench/profile/defense_step.rs`: C2F2, one SPC-2 batch of 128 pairs, triplet
loss (margin 0.2, random negatives mined on clean embeddings), Adam; the inner maximisation of each
defense with the budget of its rdml preset (eps 77/255, step 3/255, 32 steps; CA-TRIDE 16 steps;
positive perturbation eps 0.1, step 0.05, 5 steps; MDProp/AdvProp eps 0.01, 1 step), L-inf PGD
with sign steps, model in eval mode during the attack. Written from the papers, like rdml's.

Usage: python bench/torch_defense_step.py --data DIR [--threads 2] [--steps 3] [--json OUT]
"""
import argparse, json, time
import numpy as np
import torch
import torch.nn.functional as F
from torch_epoch import C2F2, read_idx

E77, S3 = 77 / 255, 3 / 255


def pgd(model, x, movable, loss_fn, eps, step, steps, stop=None):
    """Minimise loss_fn(emb of all rows) over the movable rows (sign steps, L-inf ball, [0,1])."""
    model.eval()
    m = movable.view(-1, 1, 1, 1).float()
    x0, xa = x.clone(), x.clone()
    for _ in range(steps):
        xa.requires_grad_(True)
        loss = loss_fn(model(xa))
        g, = torch.autograd.grad(loss, xa)
        with torch.no_grad():
            xa = torch.min(torch.max(xa - step * g.sign() * m, x0 - eps), x0 + eps).clamp(0, 1)
        if stop is not None and stop(loss.item()):
            break
    model.train()
    return xa.detach()


def thirds(e):
    t = len(e) // 3
    return e[:t], e[t:2 * t], e[2 * t:]


def d(a, b):
    return (a - b).pow(2).sum(1).add(1e-12).sqrt()


def triplet(e):
    a, p, n = thirds(e)
    return F.relu(d(a, p) - d(a, n) + 0.2).mean()


def att_mean(x, lam=10.0):
    w = torch.exp(-lam * (x.detach() - x.detach().min()))
    return (w * x).sum() / w.sum()


def top_half(x):
    k = (len(x) + 1) // 2
    return torch.sort(x)[0][:k].mean()


def step_fn(name, model, opt, xb, yb, rng, state):
    with torch.no_grad():
        model.eval()
        clean = model(xb)
        model.train()
    anc = np.arange(0, len(yb), 2)
    pos = anc + 1
    neg = np.array([rng.choice(np.nonzero(yb != yb[i])[0]) for i in anc])
    t = len(anc)
    idx = np.concatenate([anc, pos, neg])
    x3 = xb[idx]
    mv = lambda a, p, n: torch.tensor([a] * t + [p] * t + [n] * t)
    extra = None
    if name == "none":
        emb = model(x3)
    elif name == "madry":
        xa = pgd(model, x3, mv(1, 1, 1), lambda e: -(d(*thirds(e)[:2]) - d(thirds(e)[0], thirds(e)[2])).mean(), E77, S3, 32)
        emb = model(xa)
    elif name == "act":
        xa = pgd(model, x3, mv(0, 1, 1), lambda e: d(thirds(e)[1], thirds(e)[2]).mean(), E77, S3, 32)
        emb = model(xa)
    elif name == "est":
        ref = clean + 1e-7 * torch.sign(torch.randn_like(clean))
        xa = pgd(model, xb, torch.ones(len(xb)), lambda e: -d(e, ref).mean(), E77, S3, 32)
        e_all = model(xa)
        emb = e_all[torch.from_numpy(idx)]
    elif name == "hm-lga-ics":
        hd = -0.2 * min(max(state["prev"], 0.0), 0.2) / 0.2
        last = [None]

        def sat(v):
            s = last[0] is not None and abs(v - last[0]) < 1e-7
            last[0] = v
            return s
        xa = pgd(model, x3, mv(1, 1, 1), lambda e: (d(*thirds(e)[:2]) - d(thirds(e)[0], thirds(e)[2]) - hd).clamp(max=0).pow(2).mean(), E77, S3, 32, sat)
        all5 = model(torch.cat([xa, xb[anc], xb[pos]]))
        emb = all5[:3 * t]
        a_c, p_c = all5[3 * t:4 * t], all5[4 * t:]
        extra = 0.5 * F.relu(d(a_c, emb[:t]) - d(a_c, p_c)).mean()
    elif name == "ca-tride":
        cap = state["steps"] % 2 == 0
        a0 = clean[torch.from_numpy(anc)]

        def c(e):
            a, p, n = thirds(e)
            return att_mean(d(a, p)) - att_mean(d(a, n))

        def lanp(e):
            a, p, n = thirds(e)
            cc = c(e)
            return F.relu(-cc + torch.exp(F.relu(cc.detach())) * (top_half(d(a, n)) - d(a, a0).mean()))
        step = S3 * 0.5  # progressive step at half of training
        if cap:
            xa = pgd(model, x3, mv(0, 1, 1), lambda e: F.relu(-c(e)), E77, step, 16, lambda v: v < 1e-5)
        else:
            xa = pgd(model, x3, mv(1, 0, 0), lanp, E77, step, 16, lambda v: v < 1e-5)
        emb = model(xa)
        if not cap:
            a, p, n = thirds(emb)
            extra = 0.5 * F.relu(top_half(d(a, p)) - top_half(d(a, n)) + 0.04)
    elif name == "positive-perturbation":
        xa = pgd(model, x3, mv(0, 1, 0), lambda e: -d(thirds(e)[1], thirds(e)[0]).mean(), 0.1, 0.05, 5)
        emb = model(xa)
    elif name in ("advprop", "mdprop"):
        dists = [1] if name == "advprop" else [1, 5]
        emb_c = model(xb)
        loss = 0.0
        losses = [emb_c]
        for T in dists:
            tg = [clean[torch.from_numpy(np.array([rng.choice(np.nonzero(yb != yb[i])[0]) for i in range(len(yb))]))] for _ in range(T)]
            xa = pgd(model, xb, torch.ones(len(xb)), lambda e: sum(d(e, g).mean() for g in tg) / T, 0.01, 0.01, 1)
            losses.append(model(xa))
        total = sum(F.relu(d(e[anc], e[pos]) - d(e[anc], e[neg]) + 0.2).mean() for e in losses)
        opt.zero_grad(); total.backward(); opt.step()
        return total.item()
    loss = triplet(emb) + (extra if extra is not None else 0.0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    state["prev"] = triplet(emb).item()
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--defenses", default="none,madry,est,act,hm-lga-ics,ca-tride,positive-perturbation,advprop,mdprop")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz")
    y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz").astype(np.int64)
    out = {"framework": "pytorch " + torch.__version__, "threads": a.threads, "seconds_per_step": {}}
    for name in a.defenses.split(","):
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        model = C2F2()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-7)
        by_class = {c: np.nonzero(y == c)[0] for c in np.unique(y)}
        b = rng.permutation(len(y))[:128]
        pos = np.array([rng.choice(by_class[y[i]][by_class[y[i]] != i]) for i in b])
        idx = np.stack([b, pos], 1).reshape(-1)
        xb = torch.from_numpy(x[idx].astype(np.float32) / 255.0)
        yb = y[idx]
        state = {"prev": 2.0, "steps": 0}
        times = []
        for s in range(a.steps + 1):
            t0 = time.perf_counter()
            step_fn(name, model, opt, xb, yb, rng, state)
            state["steps"] += 1
            if s > 0:
                times.append(time.perf_counter() - t0)
        out["seconds_per_step"][name] = sum(times) / len(times)
        print(name, out["seconds_per_step"][name], flush=True)
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
