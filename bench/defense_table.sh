#!/usr/bin/env bash
# Issue 4's must-show table at a reduced budget: the Fashion-MNIST defense presets trained with the
# same data, model, loss, sampler, optimizer and seed, with fewer PGD steps of a larger step (so
# that steps × step still reaches ε = 77/255) and fewer batches, then the rob28 suite on each
# (`rdml compare`: clean R@1, MAP@R, NMI, ERS, ARS, training time). Resumable: rerun the same
# command after an interruption and finished runs are reused, unfinished ones resume from their
# last completed epoch.
# Usage: bench/defense_table.sh [OUT] [EPOCHS] [BATCHES_PER_EPOCH] [STEPS] [STEP] [QUERIES]
# Defaults: 3 epochs of 100 batches, 4 PGD steps of 0.1 (CA-TRIDE: half the steps, twice the step,
# progressive step off because α·e/E is 0 in the first of so few epochs), 256 queries.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/defense-table}
epochs=${2:-3}
batches=${3:-100}
steps=${4:-4}
step=${5:-0.1}
queries=${6:-256}
mkdir -p "$out/configs"
cargo build --release --quiet
bin=./target/release/rdml

half_steps=$(( steps / 2 > 0 ? steps / 2 : 1 ))
double_step=$(awk "BEGIN { print 2 * $step }")
cfg() { # preset name steps step [extra line]
  $bin presets "$1" | sed -e "s/^name = .*/name = \"$2\"/" -e "s/^steps = .*/steps = $3/" -e "s/^step = .*/step = $4/" > "$out/configs/$2.toml"
  if [ $# -ge 5 ]; then echo "$5" >> "$out/configs/$2.toml"; fi
}
$bin presets fashion-c2f2-triplet | sed 's/^name = .*/name = "triplet"/' > "$out/configs/triplet.toml"
$bin presets fashion-c2f2-mdprop | sed 's/^name = .*/name = "mdprop"/' > "$out/configs/mdprop.toml"
cfg fashion-c2f2-act "act-${steps}x$step" "$steps" "$step"
cfg fashion-c2f2-est "est-${steps}x$step" "$steps" "$step"
cfg fashion-c2f2-hm-lga-ics "hm-lga-ics-${steps}x$step" "$steps" "$step"
cfg fashion-c2f2-ca-tride "ca-tride-${half_steps}x$double_step" "$half_steps" "$double_step" "progressive = false"

$bin compare --configs "$out"/configs/{triplet,mdprop,act-${steps}x$step,est-${steps}x$step,hm-lga-ics-${steps}x$step,ca-tride-${half_steps}x$double_step}.toml \
  --out "$out" --epochs "$epochs" --max-batches "$batches" --queries "$queries" --set eval.nmi=true
cat "$out/compare.md"
