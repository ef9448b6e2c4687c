#!/usr/bin/env bash
# Certified Recall@1 of two run folders at three σ (issue 53; result in bench/README.md).
#
#   bench/certify.sh OUT RUN... [-- rdml certify options]
#
# Each RUN is certified at σ ∈ {0.12, 0.25, 0.5} (SIGMAS), radii 0.1, 0.25, 0.5 (ℓ2, pixels of
# [0, 1] images), n = SAMPLES (default 10,000) copies for the bound, n₀ = 100 to pick the label,
# α = 0.001, on the first QUERIES test items (default 500), with DATA as the test data when set,
# by each of METHODS (default cohen; center: centre smoothing, its 10,000 copies to pick and as
# many to check the centre). Each record is OUT/NAME-σ[-center].json; OUT/table.md holds one line
# per run, method and σ with the time.
set -euo pipefail
out=$1; shift
runs=()
while (($#)) && [[ $1 != -- ]]; do runs+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
rdml=${RDML:-$(dirname "$0")/../target/release/rdml}
mkdir -p "$out"
for run in "${runs[@]}"; do
  for method in ${METHODS:-cohen}; do
    for sigma in ${SIGMAS:-0.12 0.25 0.5}; do
      suffix=-$method
      [[ $method == cohen ]] && suffix=
      name=$(basename "$run")-$sigma$suffix
      "$rdml" certify --model "$run" ${DATA:+--data "$DATA"} --method "$method" --sigma "$sigma" \
        --radii 0.1,0.25,0.5 --samples "${SAMPLES:-10000}" --alpha 0.001 --queries "${QUERIES:-500}" \
        --seed 0 --json --quiet "$@" > "$out/$name.json.tmp"
      mv "$out/$name.json.tmp" "$out/$name.json"
      echo "certified $name"
    done
  done
done
/usr/bin/python3 - "$out" << 'PY' | tee "$out/table.md"
import json, pathlib, sys
print("| run | method | σ | queries | certified R@1 at 0.1 | 0.25 | 0.5 | smoothed R@1 | abstained | seconds |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(p.read_text())
    c = r["certified"]
    print(f"| {pathlib.Path(r['model']).name} | {r.get('method', 'cohen')} | {r['sigma']:g} | {r['queries_used'] - r['lone']} | {c['0.1']:.1f} | "
          f"{c['0.25']:.1f} | {c['0.5']:.1f} | {r['clean']:.1f} | {r['abstained']:.1f} | {r['seconds']:.0f} |")
PY
