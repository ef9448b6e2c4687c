#!/usr/bin/env bash
# Recall@1/2/4/8 and MAP@R of 60,000 random 512-d unit embeddings (10 or more classes), rdml's
# blocked search against PyTorch's cdist + argsort (in chunks of 1,000 queries), same data, with the
# peak memory of each (GNU time). Usage: bench/knn.sh [N] [DIM] [CLASSES] [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-60000}; dim=${2:-512}; classes=${3:-12000}; py=${4:-python3}
out=bench/out; mkdir -p $out
cargo build --release --quiet --example knn_bench
/usr/bin/time -f "%M" -o $out/rdml-knn.rss ./target/release/examples/knn_bench $n $dim $classes $out/emb > $out/rdml-knn.json
/usr/bin/time -f "%M" -o $out/torch-knn.rss $py bench/torch_knn.py --emb $out/emb.f32 --labels $out/emb.u32 --n $n --dim $dim > $out/torch-knn.json
python3 - <<'PY'
import json
r = json.load(open("bench/out/rdml-knn.json")); t = json.load(open("bench/out/torch-knn.json"))
rr = int(open("bench/out/rdml-knn.rss").read()); tr = int(open("bench/out/torch-knn.rss").read())
res = {"rdml": {**r, "peak_rss_mib": rr // 1024}, "pytorch": {**t, "peak_rss_mib": tr // 1024},
       "speedup_pytorch_over_rdml": round(t["seconds"] / r["seconds"], 2)}
print(json.dumps(res, indent=2))
json.dump(res, open("bench/out/knn.json", "w"), indent=2)
PY
