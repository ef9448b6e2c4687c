#!/usr/bin/env bash
# robrank's own numbers against rdml's on the same weights (issue 41; result in bench/README.md).
#
#   bench/robrank_crosscheck.sh [ROBRANK_CHECKOUT]
#
# 1. trains robrank's `fashion:rc2f2:ptripletN` for one epoch with robrank itself (its
#    cmdline.Train, maxepoch set to one SPC-2 epoch), in a venv with pytorch-lightning 1.6.3;
# 2. runs robrank's rob28 profile (bin/swipe.py -p rob28 -m Q/128: the first Q test items as
#    queries) and robrank's own ERS (tools/pjswipe.py);
# 3. imports the Lightning checkpoint (`rdml import`), runs `rdml robustness --profile rob28
#    --robrank-compat` on the same queries once (seed 0, timed) and with --repeats for the
#    seed-to-seed spread of the randomised columns;
# 4. prints both tables and times side by side (bench/robrank_crosscheck.py) and exits 1 when
#    a column is outside its tolerance.
#
# robrank is read from ROBRANK_CHECKOUT (default: $cache/src, cloned there from GitHub at the
# pinned commit when absent). Fashion-MNIST comes from Debian's dataset-fashion-mnist
# (/usr/share/datasets/fashion-mnist, else `apt-get download` into the cache). PyTorch is
# taken from rdml's Python venv when it has one ($RDML_PY_VENV), else installed from PyPI.
# Everything lands under $RDML_ROBRANK_CACHE (default ~/.cache/rdml/robrank); each run gets
# a new folder runs/<time>/ there. Environment: QUERIES (a multiple of 128, default 128),
# REPEATS (rdml seeds for the spread, default 5), CKPT (a robrank checkpoint of an earlier run,
# .../version_0/checkpoints/*.ckpt: its run is copied and not trained again).
set -euo pipefail

source "$(dirname "$0")/robrank_env.sh"
queries=${QUERIES:-128}
repeats=${REPEATS:-5}
(( queries % 128 == 0 && queries > 0 )) || {
  echo "QUERIES=$queries: robrank attacks whole batches of 128; expected a multiple of 128" >&2
  exit 2
}

logs=logs_fashion-rc2f2-ptripletN/lightning_logs
if [[ -n ${CKPT:-} ]]; then
  [[ -f $CKPT ]] || { echo "CKPT=$CKPT: no such checkpoint" >&2; exit 2; }
  echo "== robrank: the run of $CKPT (CKPT: no training)"
  mkdir -p "$logs"
  cp -r "$(dirname "$(dirname "$CKPT")")" "$logs/version_0"
  rm -f "$logs"/version_0/checkpoints/*.json
else
  echo "== robrank: one epoch of fashion:rc2f2:ptripletN"
  cat > train.py << 'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import robrank as rr
rr.configs.rc2f2.maxepoch = 2  # SPC-2 losses halve it: one epoch
rr.cmdline.Train(['-C', 'fashion:rc2f2:ptripletN', '-g', '0'])
EOF
  HOME=$home cpu robrank-train "$py" train.py "$src" > train.log 2>&1 || { tail -20 train.log >&2; exit 1; }
fi
ckpt=$(ls "$logs"/version_0/checkpoints/*.ckpt | head -1)
echo "   checkpoint $ckpt"

echo "== robrank: rob28 on the first $queries test items (bin/swipe.py)"
HOME=$home PYTHONPATH=$src cpu robrank-rob28 "$py" "$src/bin/swipe.py" -p rob28 -C "$ckpt" \
  -m $((queries / 128)) -D cpu > swipe.log 2>&1 || { tail -20 swipe.log >&2; exit 1; }
JTYPE=rob28 HOME=$home PYTHONPATH=$src "$py" "$src/tools/pjswipe.py" logs_fashion-rc2f2-ptripletN \
  > pjswipe.log 2>&1 || { tail -20 pjswipe.log >&2; exit 1; }

echo "== rdml: import and rob28 --robrank-compat"
(cd "$repo" && cargo build --release -q)
rdml=$repo/target/release/rdml
"$rdml" import --from "$ckpt" --arch c2f2 --out rdml-run --quiet > import.log
cpu rdml-rob28 "$rdml" robustness --model rdml-run --data "$fm" --profile rob28 --robrank-compat \
  --queries "$queries" --batch 128 --seed 0 --quiet --json > rdml.json
"$rdml" robustness --model rdml-run --data "$fm" --profile rob28 --robrank-compat \
  --queries "$queries" --batch 128 --seed 0 --repeats "$repeats" --quiet --json > rdml-repeats.json

"$py" "$repo/bench/robrank_crosscheck.py" --robrank "$ckpt.rob28.json" --pjswipe pjswipe.log \
  --rdml rdml.json --repeats rdml-repeats.json --times times --queries "$queries"
