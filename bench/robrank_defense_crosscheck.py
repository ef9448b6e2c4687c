"""robrank's defenses against rdml's: one table (bench/robrank_defense_crosscheck.sh).

Per defense: the robrank-trained model and each rdml-trained seed, each scored by rdml's `eval`
(R@1, mAP@10, NMI) and rdml's rob28 `--robrank-compat` (every column, ERS), robrank's models also
by robrank's own rob28 (its swipe JSON as tools/pjswipe.py reads it, and the ERS pjswipe prints);
each code's training time. Then, per defense, rdml's mean (and spread over its seeds) against
robrank's: clean R@1 within 2 points and ERS within 5 points or rdml's seed spread (issue 54).
rdml's seeds are --first-seed onwards; with --robrank 0 the folder holds rdml's runs alone (no
robrank rows, no comparison).
"""

import argparse
import json
import math
import re
from pathlib import Path

from robrank_crosscheck import COLUMNS, mean_std, robrank_columns, times


def rdml_row(folder, name):
    m = json.loads((folder / f"{name}.eval.json").read_text())
    m = m.get("metrics", m)
    table = json.loads((folder / f"{name}.rob28.json").read_text())["table"]
    cols = {row["column"]: row["raw"] for row in table["rows"]}
    return dict(r1=100 * m["recall@1"], map10=100 * m["map@10"], nmi=100 * m["nmi"], cols=cols, ers=table["ers"])


def cells(row):
    out = [f"{row['r1']:.1f}", f"{row['map10']:.1f}", f"{row['nmi']:.1f}"] if "r1" in row else ["", "", ""]
    out += [f"{row['cols'][c]:.3f}" if c in ("TMA", "ES:D") else f"{row['cols'][c]:.1f}" for c in COLUMNS]
    return out + [f"{row['ers']:.1f}"]


def robrank_rows(folder, d, t):
    """The robrank-trained model's rows (rdml's suite, robrank's own); returns rdml's suite's row."""
    theirs = rdml_row(folder, f"robrank-{d}")
    pj = (folder / f"robrank-{d}.pjswipe.log").read_text()
    match = re.search(r"Eventual ERS\s+([0-9.]+)", pj)
    own = dict(cols=robrank_columns(folder / f"robrank-{d}.swipe.json"),
               ers=float(match.group(1)) if match else math.nan)
    train = t.get(f"robrank-train-{d}", (math.nan, math.nan))[0]
    print(f"| {d} | robrank | rdml | " + " | ".join(cells(theirs)) + f" | {train:.0f} s |")
    print(f"| {d} | robrank | robrank | " + " | ".join(cells(own)) + " | |")
    return theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", required=True, type=Path)
    ap.add_argument("--defenses", nargs="+", required=True)
    ap.add_argument("--seeds", type=int, required=True)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--robrank", type=int, choices=(0, 1), default=1, help="0: rdml's runs alone")
    ap.add_argument("--queries", type=int, required=True)
    ap.add_argument("--robrank-queries", type=int, required=True)
    a = ap.parse_args()
    t = times(a.folder / "times")
    print(f"rdml's suite: rob28 --robrank-compat on {a.queries} queries; robrank's own: {a.robrank_queries}\n")
    print("| defense | trained by | scored by | R@1 | mAP@10 | NMI | " + " | ".join(COLUMNS) + " | ERS | training |")
    print("|---" * (len(COLUMNS) + 8) + "|")
    verdicts = []
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    for d in a.defenses:
        ours = [rdml_row(a.folder, f"rdml-{d}-{s}") for s in seeds]
        if a.robrank:
            theirs = robrank_rows(a.folder, d, t)
        for s, row in zip(seeds, ours):
            train = t.get(f"rdml-train-{d}-{s}", (math.nan, math.nan))[0]
            print(f"| {d} | rdml, seed {s} | rdml | " + " | ".join(cells(row)) + f" | {train:.0f} s |")
        if not ours or not a.robrank:  # one code's runs alone: nothing to compare here
            continue
        r1, r1_sd = mean_std([r["r1"] for r in ours])
        ers, ers_sd = mean_std([r["ers"] for r in ours])
        ok_r1 = abs(r1 - theirs["r1"]) <= max(2.0, 2 * r1_sd)
        ok_ers = abs(ers - theirs["ers"]) <= max(5.0, 2 * ers_sd)
        verdicts.append(f"{d}: R@1 {r1:.1f} ± {r1_sd:.1f} vs robrank's {theirs['r1']:.1f} "
                        f"({'within' if ok_r1 else 'OUTSIDE'}); ERS {ers:.1f} ± {ers_sd:.1f} vs {theirs['ers']:.1f} "
                        f"({'within' if ok_ers else 'OUTSIDE'})")
    print()
    for v in verdicts:
        print(v)
    if a.seeds == 0 or not a.robrank:
        return
    ers = {d: rdml_row(a.folder, f"robrank-{d}")["ers"] for d in a.defenses}
    ours = {d: mean_std([rdml_row(a.folder, f"rdml-{d}-{s}")["ers"] for s in seeds])[0] for d in a.defenses}
    if "act" in ers and "hm" in ers:
        print(f"HM vs ACT, ERS: robrank-trained {ers['hm']:.1f} vs {ers['act']:.1f}; "
              f"rdml-trained {ours['hm']:.1f} vs {ours['act']:.1f}")


if __name__ == "__main__":
    main()
