"""Where the GPU time goes: sums cubecl's per-kernel profile lines (`| 3.7ms | CopyKernel_c57d3023`,
written with CUBECL_DEBUG_OPTION=profile and CUBECL_DEBUG_LOG=FILE) by kernel, the specialisation
hash left out, and prints the largest with their share, count and mean.

Usage: python3 bench/gpu_profile.py LOG [TOP=25]
"""
import re, sys
from collections import defaultdict

UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
LINE = re.compile(r"^\| (\d+(?:\.\d+)?)(ns|µs|us|ms|s)\s*\| (.+)$")
HASH = re.compile(r"_[0-9a-f]{8}\b")


def main():
    log, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    total, count = defaultdict(float), defaultdict(int)
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                name = HASH.sub("", m.group(3)).strip()
                total[name] += float(m.group(1)) * UNITS[m.group(2)]
                count[name] += 1
    if not total:
        print(f"{log}: no profiled kernel (was CUBECL_DEBUG_OPTION=profile set?)")
        return
    whole = sum(total.values())
    print(f"{sum(count.values())} kernel launches, {whole:.3f} s of kernel time, {len(total)} kernels; the {top} largest:")
    print(f"{'share':>6} {'seconds':>9} {'launches':>8} {'mean ms':>9}  kernel")
    for name in sorted(total, key=total.get, reverse=True)[:top]:
        t, n = total[name], count[name]
        short = name if len(name) <= 120 else name[:117] + "..."
        print(f"{100 * t / whole:>5.1f}% {t:>9.4f} {n:>8} {1e3 * t / n:>9.3f}  {short}")


if __name__ == "__main__":
    main()
