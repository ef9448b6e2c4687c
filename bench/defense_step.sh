#!/usr/bin/env bash
# One training step of each defense (Fashion-MNIST presets), rdml and PyTorch side by side on
# this machine, 2 threads each. Usage: bench/defense_step.sh [DATA_DIR] [PYTHON] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-/usr/share/datasets/fashion-mnist}
py=${2:-python3}
steps=${3:-3}
out=bench/out; mkdir -p $out
cargo build --release --quiet --example defense_step
RAYON_NUM_THREADS=2 ./target/release/examples/defense_step "$data" "$steps" $out/rdml-defense-step.json > /dev/null
(cd bench && $py torch_defense_step.py --data "$data" --threads 2 --steps "$steps" --json out/torch-defense-step.json > /dev/null)
python3 - <<'PY'
import json
r = json.load(open("bench/out/rdml-defense-step.json"))["seconds_per_step"]
t = json.load(open("bench/out/torch-defense-step.json"))["seconds_per_step"]
rows = {k: {"rdml_s": round(r[k], 3), "pytorch_s": round(t[k], 3), "ratio": round(r[k] / t[k], 2)} for k in r if k in t}
print(json.dumps(rows, indent=1))
json.dump(rows, open("bench/out/defense-step.json", "w"), indent=1)
PY
