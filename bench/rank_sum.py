"""Two groups of runs' scores (ERS, R@1, ...): each group's mean ± SD (n − 1) and the exact one-sided
Wilcoxon rank-sum p that the first group lies above the second, by enumerating every split of the
pooled ranks (ties get their mean rank). Used for EST's runs inside and outside robrank's harness
(issue 54, bench/README "EST in robrank's own harness"):

    python3 bench/rank_sum.py "24.1 27.1 20.3 21.4" "13.4 18.6 18.1 13.2 20.3"
"""
import itertools
import math
import statistics
import sys


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: rank_sum.py "A1 A2 ..." "B1 B2 ..."')
    try:
        a, b = ([float(v) for v in arg.split()] for arg in sys.argv[1:])
    except ValueError as e:
        sys.exit(f"rank_sum.py: every score must be a number: {e}")
    if len(a) < 2 or len(b) < 2:
        sys.exit("rank_sum.py: each group needs at least two scores")
    if not all(math.isfinite(v) for v in a + b):
        sys.exit("rank_sum.py: every score must be finite")
    if math.comb(len(a) + len(b), len(a)) > 10**7:
        sys.exit("rank_sum.py: too many splits to enumerate (more than 10^7); use fewer runs")
    r = ranks(a + b)
    observed = sum(r[: len(a)])
    splits = [sum(r[i] for i in pick) for pick in itertools.combinations(range(len(r)), len(a))]
    p = sum(s >= observed - 1e-9 for s in splits) / len(splits)
    for name, g in (("first", a), ("second", b)):
        print(f"{name}: n {len(g)}, {statistics.mean(g):.1f} ± {statistics.stdev(g):.1f}")
    print(f"rank sum of the first {observed:g}; one-sided exact p = {p:.4f} ({len(splits)} splits)")


main()
