#!/usr/bin/env bash
# robrank's own Lightning EST run, with either code's step function (issue 54; bench/README,
# "EST in robrank's own harness").
#
#   bench/est_lightning.sh robrank|rdml [ROBRANK_CHECKOUT]
#
# robrank trains `fashion:rc2f2d:ptripletN` for one SPC-2 epoch with its `override_pgditer_8`,
# exactly as bench/robrank_defense_crosscheck.sh does: its Trainer, its DataLoader, its batches.
# With `rdml`, robrank's `est_training_step` is replaced by `rdml.Defense("est")` (seed 0) on the
# same batch and weights (bench/est_step_loop.py's rdml step), and nothing else changes; the two
# then differ in the step function alone. Torch runs on one thread, so two runs can share this
# 2-core machine. The checkpoint gets `rdml import`, `rdml eval` and `rdml robustness --profile
# rob28 --robrank-compat` on 256 queries, as the cross-check scores its models. The rdml step
# imports rdml's Python package from python/ (PYTHONPATH): build its extension there first (`cd
# python && maturin develop --release`, in a venv holding maturin); one older than src/ or
# python/src/ is refused.
set -euo pipefail

step=${1:-}
[[ $step == robrank || $step == rdml ]] || { echo "usage: $0 robrank|rdml [ROBRANK_CHECKOUT]" >&2; exit 2; }
shift
source "$(dirname "$0")/robrank_env.sh"
touch override_pgditer_8
(cd "$repo" && cargo build --release -q)
rdml=$repo/target/release/rdml
if [[ $step == rdml ]]; then
  so=$(ls "$repo"/python/rdml/_rdml*.so 2> /dev/null | head -1)
  [[ -n $so ]] || { echo "$repo/python/rdml has no built extension: cd python && maturin develop --release"  >&2; exit 2; }
  newer=$(find "$repo/src" "$repo/python/src" -newer "$so" -name '*.rs' | head -1)
  [[ -z $newer ]] || { echo "$so is older than $newer: cd python && maturin develop --release" >&2; exit 2; }
fi

cat > train.py << 'EOF'
import os, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import torch as th
th.set_num_threads(1)
import robrank_torch_compat  # noqa: F401  (robrank under PyTorch 2.x)
import robrank as rr
rr.configs.rc2f2.maxepoch = 2  # SPC-2 losses halve it: one epoch
if os.environ["STEP"] == "rdml":
    import rdml
    from rc2f2 import L2  # bench/ (argv[2]): the unit-norm wrapper the other EST scripts use

    state = {}

    def est_training_step(model, batch, batch_idx, *, pgditer=None):
        # The budget below is robrank's override_pgditer_8 (77/255, 3/255, 8 steps).
        assert pgditer is None and model.config.advtrain_pgditer == 8, "expected override_pgditer_8"
        assert abs(model.config.advtrain_eps - 77 / 255) < 1e-9 and abs(model.config.advtrain_alpha - 3 / 255) < 1e-9
        if not state:
            state["defense"] = rdml.Defense(
                "est", eps=77 / 255, step=3 / 255, steps=8, seed=0,
                loss=dict(kind="triplet", distance="normalized-euclidean", miner="random", margin=0.2))
            state["model"] = L2(model.backbone)
            print("rdml's EST step in robrank's harness", flush=True)
        loss = state["defense"](state["model"], batch[0].view(-1, 1, 28, 28), batch[1].view(-1))
        model.log("Train/loss", loss)
        return loss

    rr.defenses.est_training_step = est_training_step
rr.cmdline.Train(['-C', 'fashion:rc2f2d:ptripletN', '-g', '0'])
EOF

echo "== robrank's Lightning EST, step function: $step"
HOME=$home STEP=$step PYTHONPATH=$repo/python OMP_NUM_THREADS=1 cpu "train-$step" "$py" train.py "$src" "$repo/bench" \
  > train.log 2>&1 || { tail -20 train.log >&2; exit 1; }
if [[ $step == rdml ]]; then
  grep -q "rdml's EST step in robrank's harness" train.log || { echo "rdml's step was not used (train.log)" >&2; exit 1; }
fi
ckpt=$(ls logs_fashion-rc2f2d-ptripletN/lightning_logs/version_0/checkpoints/*.ckpt | head -1)
"$rdml" import --from "$ckpt" --arch c2f2 --out model --quiet > /dev/null
"$rdml" eval --model model --data "$fm" --json > eval.json
"$rdml" robustness --model model --data "$fm" --profile rob28 --robrank-compat --queries 256 --batch 128 \
  --seed 0 --quiet --json > rob28.json
"$py" - << 'EOF'
import json
e, r = json.load(open("eval.json")), json.load(open("rob28.json"))["table"]
cols = " ".join(f"{row['column']} {row['raw']:.3g}" for row in r["rows"])
print(f"R@1 {100 * e['recall@1']:.1f}  ERS {r['ers']:.1f}  {cols}")
EOF
