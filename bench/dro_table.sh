#!/usr/bin/env bash
# Issue 5's benchmark table: DRO-TopK_M, DRO-TopK-PN_M, DRO-KL_M, DRO-KL-G against
# multi-similarity, lifted structure and triplet-semihard, every method with the same model (C2F2,
# 512-d, L2-normalised), sampler (SPC-2, 128 pairs), optimizer (Adam 1e-3, wd 1e-7), seed and
# number of batches. Fashion-MNIST: the full 60k/10k split; MNIST: its test file split 8,000/2,000
# per class (the only MNIST at hand; dataset "mnist-test-split").
# Usage: bench/dro_table.sh [FASHION_DIR] [MNIST_TEST_DIR] [FASHION_BATCHES] [MNIST_EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
fashion=${1:-/usr/share/datasets/fashion-mnist}
mnist=${2:-../shared/data/mnist-test}
fb=${3:-300}
me=${4:-4}
out=bench/out/dro; mkdir -p $out
cargo build --release --quiet
bin=./target/release/rdml

loss_of() {
  case $1 in
    triplet-semihard) printf 'kind = "triplet"\ndistance = "normalized-euclidean"\nminer = "semihard"\nmargin = 0.2\n' ;;
    multi-similarity) printf 'kind = "multi-similarity"\nalpha = 2.0\nbeta = 50.0\nbase = 0.5\nepsilon = 0.1\n' ;;
    lifted) printf 'kind = "lifted"\nmargin = 1.0\n' ;;
    dro-topk) printf 'kind = "dro"\nvariant = "top-k"\nk = 512\n' ;;
    dro-topk-pn) printf 'kind = "dro"\nvariant = "top-k-pn"\nk = 512\n' ;;
    dro-kl) printf 'kind = "dro"\nvariant = "kl"\ngamma = 0.1\n' ;;
    dro-kl-g) printf 'kind = "dro"\nvariant = "kl-g"\ngamma = 0.01\n' ;;
  esac
}

methods="dro-topk dro-topk-pn dro-kl dro-kl-g multi-similarity lifted triplet-semihard"
for ds in fashion mnist; do
  for m in $methods; do
    dir=$out/$ds-$m
    [ -f $dir/run.json ] && grep -q '"completed": true' $dir/run.json && continue
    if [ $ds = fashion ]; then
      data="dataset = \"fashion-mnist\"
root = \"$fashion\""; train="epochs = 1
max_batches = $fb"
    else
      data="dataset = \"mnist-test-split\"
root = \"$mnist\"
train_fraction = 0.8"; train="epochs = $me"
    fi
    cat > $out/$ds-$m.toml <<TOML
name = "$ds-$m"
seed = 0

[data]
$data

[model]
arch = "c2f2"
embedding_dim = 512
l2_normalize = true

[loss]
$(loss_of $m)
[train]
$train
sampler = { kind = "spc2", pairs = 128 }
optimizer = { lr = 1e-3, weight_decay = 1e-7 }

[eval]
batch_size = 128
nmi = false
TOML
    echo "== $ds $m"
    RAYON_NUM_THREADS=2 $bin train --config $out/$ds-$m.toml --out $dir --quiet > $dir.log 2>&1 || { echo "failed: see $dir.log"; continue; }
  done
done

python3 - $out $methods <<'PY'
import json, sys, os
out, methods = sys.argv[1], sys.argv[2:]
rows = []
for ds in ["fashion", "mnist"]:
    for m in methods:
        p = os.path.join(out, f"{ds}-{m}", "run.json")
        if not os.path.exists(p):
            continue
        r = json.load(open(p))
        e = r["epochs"][-1]; x = e["metrics"]; rec = {int(k[7:]): v for k, v in x.items() if k.startswith("recall@")}
        rows.append({"data": ds, "method": m, "R@1": rec[1], "R@2": rec[2], "R@4": rec[4], "R@8": rec[8],
                     "MAP@R": round(x["map@r"], 4), "batches": sum(ep["batches"] for ep in r["epochs"]),
                     "train_s": round(r["train_seconds"], 1)})
json.dump(rows, open(os.path.join(out, "table.json"), "w"), indent=1)
print("| data | method | R@1 | R@2 | R@4 | R@8 | MAP@R | batches | train s |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['data']} | {r['method']} | {r['R@1']:.4f} | {r['R@2']:.4f} | {r['R@4']:.4f} | {r['R@8']:.4f} | {r['MAP@R']:.4f} | {r['batches']} | {r['train_s']} |")
PY
