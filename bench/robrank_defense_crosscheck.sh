#!/usr/bin/env bash
# robrank's defenses against rdml's at the same budget (issue 54; result in bench/README.md).
#
#   bench/robrank_defense_crosscheck.sh [ROBRANK_CHECKOUT]
#
# 1. robrank trains ACT (`fashion:rc2f2p:ptripletN`), EST (`fashion:rc2f2d:ptripletN`) and
#    HM[S, g_LGA]&ICS (`fashion:rc2f2ghmetsmi:ptripletN`, its autogen configs generated first)
#    for one SPC-2 epoch (maxepoch 2, as bench/robrank_crosscheck.sh) with its own
#    `override_pgditer_8` (8 PGD steps of 3/255 in 77/255); its checkpoints are imported;
# 2. rdml trains its presets (fashion-c2f2-act, fashion-c2f2-est, fashion-c2f2-hm-lga-ics) for
#    one epoch with `--set defense.steps=8`, once per seed (SEEDS, default 1: seeds
#    FIRST_SEED..FIRST_SEED+SEEDS-1, FIRST_SEED default 0; SEEDS=0: robrank's models alone;
#    ROBRANK=0: rdml's alone, for more seeds of a defense robrank already trained: the run
#    folder is a new one, so its table holds rdml's rows alone, to be read beside the earlier one);
# 3. every model: `rdml eval --json` (R@1, mAP@10, NMI) and `rdml robustness --profile rob28
#    --robrank-compat` on the first QUERIES test items (default 256); robrank's models also
#    through robrank's own rob28 (bin/swipe.py, tools/pjswipe.py) on ROBRANK_QUERIES (default 128);
# 4. one table of them all with each code's training time (bench/robrank_defense_crosscheck.py).
#
# Set-up (robrank's source, its venv, Fashion-MNIST, the run folder) is bench/robrank_env.sh's,
# shared with bench/robrank_crosscheck.sh. DEFENSES picks some of "act est hm" (default all).
set -euo pipefail

seeds=${SEEDS:-1}
first=${FIRST_SEED:-0}
with_robrank=${ROBRANK:-1}
whole='^(0|[1-9][0-9]*)$'  # no leading zero: bash would read 010 as octal, Python as ten
[[ $seeds =~ $whole && $first =~ $whole ]] || { echo "SEEDS=$seeds FIRST_SEED=$first: expected whole numbers" >&2; exit 2; }
[[ $with_robrank == 0 || $with_robrank == 1 ]] || { echo "ROBRANK=$with_robrank: expected 0 or 1" >&2; exit 2; }
(( seeds > 0 || with_robrank == 1 )) || { echo "SEEDS=0 with ROBRANK=0 trains nothing" >&2; exit 2; }
source "$(dirname "$0")/robrank_env.sh"
queries=${QUERIES:-256}
rqueries=${ROBRANK_QUERIES:-128}
defenses=${DEFENSES:-act est hm}
(( rqueries % 128 == 0 && rqueries > 0 )) || {
  echo "ROBRANK_QUERIES=$rqueries: robrank attacks whole batches of 128; expected a multiple of 128" >&2
  exit 2
}
declare -A config=([act]=fashion:rc2f2p:ptripletN [est]=fashion:rc2f2d:ptripletN [hm]=fashion:rc2f2ghmetsmi:ptripletN)
declare -A preset=([act]=fashion-c2f2-act [est]=fashion-c2f2-est [hm]=fashion-c2f2-hm-lga-ics)

# robrank's HM configs are generated files (robrank/models/autogen/autogen.py).
[[ -f $src/robrank/models/autogen/rc2f2ghmetsmi.py ]] ||
  (cd "$src/robrank/models/autogen" && "$py" autogen.py > /dev/null)
# robrank reads its budget override from a file in its working folder.
touch override_pgditer_8
(cd "$repo" && cargo build --release -q)
rdml=$repo/target/release/rdml

score() { # NAME RUN: eval and rdml's rob28 --robrank-compat of a run folder
  "$rdml" eval --model "$2" --data "$fm" --json > "$1.eval.json"
  cpu "rdml-rob28-$1" "$rdml" robustness --model "$2" --data "$fm" --profile rob28 --robrank-compat \
    --queries "$queries" --batch 128 --seed 0 --quiet --json > "$1.rob28.json"
}

for d in $defenses; do
  cfg=${config[$d]}
  [[ -n $cfg ]] || { echo "DEFENSES: '$d'; expected some of act est hm" >&2; exit 2; }
  if [[ $with_robrank == 1 ]]; then
    echo "== robrank: one epoch of $cfg"
    cat > "train-$d.py" << EOF
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import robrank_torch_compat  # robrank's ICS under PyTorch 2.x
import robrank as rr
rr.configs.rc2f2.maxepoch = 2  # SPC-2 losses halve it: one epoch
rr.cmdline.Train(['-C', '$cfg', '-g', '0'])
EOF
    HOME=$home cpu "robrank-train-$d" "$py" "train-$d.py" "$src" "$repo/bench" > "train-$d.log" 2>&1 ||
      { tail -20 "train-$d.log" >&2; exit 1; }
    logs=logs_${cfg//:/-}
    ckpt=$(ls "$logs"/lightning_logs/version_0/checkpoints/*.ckpt | head -1)
    "$rdml" import --from "$ckpt" --arch c2f2 --out "robrank-$d" --quiet > /dev/null
    score "robrank-$d" "robrank-$d"
    echo "== robrank: its rob28 on the first $rqueries test items"
    HOME=$home PYTHONPATH=$src cpu "robrank-rob28-$d" "$py" "$src/bin/swipe.py" -p rob28 -C "$ckpt" \
      -m $((rqueries / 128)) -D cpu > "swipe-$d.log" 2>&1 || { tail -20 "swipe-$d.log" >&2; exit 1; }
    cp "$ckpt.rob28.json" "robrank-$d.swipe.json"
    JTYPE=rob28 HOME=$home PYTHONPATH=$src "$py" "$src/tools/pjswipe.py" "$logs" > "robrank-$d.pjswipe.log" 2>&1 ||
      { tail -20 "robrank-$d.pjswipe.log" >&2; exit 1; }
  fi
  for ((s = first; s < first + seeds; s++)); do
    echo "== rdml: one epoch of ${preset[$d]}, 8 steps, seed $s"
    cpu "rdml-train-$d-$s" "$rdml" train --config "${preset[$d]}" --data "$fm" --epochs 1 \
      --set defense.steps=8 --set seed=$s --out "rdml-$d-$s" --quiet > "rdml-train-$d-$s.log"
    score "rdml-$d-$s" "rdml-$d-$s"
  done
done

/usr/bin/python3 "$repo/bench/robrank_defense_crosscheck.py" --folder "$run" --defenses $defenses \
  --seeds "$seeds" --first-seed "$first" --robrank "$with_robrank" --queries "$queries" --robrank-queries "$rqueries" | tee table.md
