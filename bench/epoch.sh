#!/usr/bin/env bash
# One training epoch of fashion-c2f2-triplet (469 SPC-2 batches of 128 pairs), rdml and PyTorch
# side by side on this machine, each on 2 threads. Needs the full Fashion-MNIST
# (apt-get install dataset-fashion-mnist) and a Python with torch (see bench/README.md).
# Usage: bench/epoch.sh [DATA_DIR] [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-/usr/share/datasets/fashion-mnist}
py=${2:-python3}
out=bench/out; mkdir -p $out
cargo build --release --quiet
RAYON_NUM_THREADS=2 ./target/release/rdml train --config fashion-c2f2-triplet --out $out/rdml-epoch \
  --epochs 1 --set data.root=\"$data\" --set eval.nmi=false --quiet > /dev/null
rdml_s=$(python3 -c "import json;print(json.load(open('$out/rdml-epoch/run.json'))['epochs'][0]['seconds'])")
$py bench/torch_epoch.py --data "$data" --threads 2 --json $out/torch-epoch.json > /dev/null
torch_s=$(python3 -c "import json;print(json.load(open('$out/torch-epoch.json'))['seconds'])")
python3 - "$rdml_s" "$torch_s" <<'PY'
import json, sys
r, t = float(sys.argv[1]), float(sys.argv[2])
res = {"workload": "fashion-c2f2-triplet, 1 epoch, 469 batches x 256 images, 2 threads",
       "rdml_seconds": round(r, 1), "pytorch_seconds": round(t, 1), "ratio_rdml_over_pytorch": round(r / t, 2)}
print(json.dumps(res, indent=2))
json.dump(res, open("bench/out/epoch.json", "w"), indent=2)
PY
