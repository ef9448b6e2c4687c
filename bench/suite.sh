#!/usr/bin/env bash
# The rob28 ERS suite on the first Q Fashion-MNIST test images (all 10,000 as candidates): rdml
# against a vectorised PyTorch implementation of the same attacks on the same weights.
# Usage: bench/suite.sh RUN_DIR [QUERIES] [DATA] [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
run=$(realpath "$1"); q=${2:-512}; data=${3:-/usr/share/datasets/fashion-mnist}; py=${4:-python3}
out=bench/out; mkdir -p $out
cargo build --release --quiet
s=$(date +%s.%N)
./target/release/rdml robustness --model "$run" --profile rob28 --queries $q --out $out/rdml-suite.json > $out/rdml-suite.txt
e=$(date +%s.%N)
(cd bench && $py torch_suite.py --run "$run" --data "$data" --queries $q) > $out/torch-suite.json
python3 - "$s" "$e" <<'PY'
import json, sys
r = float(sys.argv[2]) - float(sys.argv[1]); t = json.load(open("bench/out/torch-suite.json"))
res = {"queries": t["queries"], "rdml_seconds": round(r, 1), "pytorch_seconds": round(t["seconds"], 1),
       "ratio_rdml_over_pytorch": round(r / t["seconds"], 2), "reference_robrank_seconds_512": 1136,
       "ratio_rdml_over_robrank": round(r / 1136, 3) if t["queries"] == 512 else None,
       "pytorch_raw": t["raw"]}
print(json.dumps(res, indent=2)); json.dump(res, open("bench/out/suite.json", "w"), indent=2)
PY
cat $out/rdml-suite.txt
