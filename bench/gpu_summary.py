"""The table of `bench/gpu.sh`: rdml on each device against PyTorch on the same GPU, from what the
measurements left in OUT_DIR (each side's result JSON and `measure`'s wall time and peak memory).
Rows appear only for workloads both sides finished, so it can run after every workload of a run
that may be cut short.

Usage: python3 bench/gpu_summary.py OUT_DIR "DEVICES" [--quiet]
Writes OUT_DIR/summary.json; prints the table unless --quiet.
"""
import json, os, sys


def load(out, name):
    p = os.path.join(out, name)
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def measured(out, name):
    """measure's record of a command that exited 0, else None."""
    m = load(out, f"{name}.json")
    return m if m and m.get("rc") == 0 else None


def rows(out, devices):
    """(workload, rdml device, PyTorch TF32 mode, rdml value, PyTorch value, measurement key)."""
    found = []
    for d in devices:
        for tf in ["default", "on"]:
            ep_r, ep_t = load(out, f"epoch-run-{d}/run.json"), load(out, f"torch-{tf}-epoch-r.json")
            if ep_r and ep_t and ep_r.get("epochs"):
                found.append(("epoch fashion-c2f2-triplet (s)", d, tf,
                              ep_r["epochs"][0]["seconds"], ep_t["epoch_seconds"], "epoch"))
            for w in ["c2f2-act", "resnet18", "resnet18-act"]:
                r, t = load(out, f"rdml-{d}-{w}-r.json"), load(out, f"torch-{tf}-{w}-r.json")
                if r and t and w in t.get("seconds_per_step", {}):
                    found.append((f"{w} step (s)", d, tf, r["seconds_per_step"],
                                  t["seconds_per_step"][w], w))
            r, t = measured(out, f"rdml-{d}-rob224"), measured(out, f"torch-{tf}-rob224")
            if r and t:
                found.append(("rob224 suite, 512 queries (s, wall)", d, tf, r["wall_s"], t["wall_s"], "rob224"))
    return found


def main():
    out, devices = sys.argv[1], sys.argv[2].split()
    quiet = "--quiet" in sys.argv[3:]
    res = []
    lines = [f"{'workload':<38} {'rdml on':>8} {'torch TF32':>10} {'rdml':>9} {'PyTorch':>9} "
             f"{'ratio':>6} {'rdml MiB':>9} {'torch MiB':>9}"]
    for name, d, tf, a, b, key in rows(out, devices):
        ma = (load(out, f"rdml-{d}-{key}.json") or {}).get("peak_mib")
        mb = (load(out, f"torch-{tf}-{key}.json") or {}).get("peak_mib")
        cell = lambda m: f"{m:>9.0f}" if m is not None else f"{'-':>9}"
        lines.append(f"{name:<38} {d:>8} {tf:>10} {a:>9.4f} {b:>9.4f} {a / b:>6.2f} {cell(ma)} {cell(mb)}")
        res.append({"workload": name, "rdml_device": d, "pytorch_tf32": tf, "rdml": a, "pytorch": b,
                    "ratio": a / b, "rdml_peak_mib": ma, "pytorch_peak_mib": mb})
    tmp = os.path.join(out, "summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, os.path.join(out, "summary.json"))
    if not quiet:
        print("\n".join(lines) if res else "no workload finished on both sides")


if __name__ == "__main__":
    main()
