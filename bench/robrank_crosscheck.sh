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

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${RDML_ROBRANK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdml/robrank}
src=${1:-$cache/src}
queries=${QUERIES:-128}
repeats=${REPEATS:-5}
pinned=38ec207bc4
py_venv=${RDML_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdml/py-venv}
(( queries % 128 == 0 && queries > 0 )) || {
  echo "QUERIES=$queries: robrank attacks whole batches of 128; expected a multiple of 128" >&2
  exit 2
}
mkdir -p "$cache"

# robrank's source, at the commit whose definitions ../shared/reference describes.
if [[ ! -f "$src/robrank/cmdline.py" ]]; then
  [[ -n "${1:-}" ]] && { echo "$src: not a robrank checkout (no robrank/cmdline.py)" >&2; exit 2; }
  git clone -q https://github.com/cdluminate/robrank "$src.part" && git -C "$src.part" checkout -q "$pinned" &&
    mv "$src.part" "$src" || {
    echo "robrank's source is needed: git clone https://github.com/cdluminate/robrank DIR" \
      "(commit $pinned), then bench/robrank_crosscheck.sh DIR" >&2
    exit 2
  }
fi
if git -C "$src" rev-parse HEAD > /dev/null 2>&1; then
  head=$(git -C "$src" rev-parse HEAD)
  [[ $head == "$pinned"* ]] || echo "note: robrank at $head, the tables in bench/README were made at $pinned" >&2
fi

# Fashion-MNIST's four IDX files, where robrank reads them: $HOME/.torch/FashionMNIST/raw.
fm=/usr/share/datasets/fashion-mnist
if [[ ! -f $fm/t10k-images-idx3-ubyte.gz ]]; then
  fm=$cache/fashion-mnist/usr/share/datasets/fashion-mnist
  if [[ ! -f $fm/t10k-images-idx3-ubyte.gz ]]; then
    (cd "$cache" && apt-get download dataset-fashion-mnist > /dev/null &&
      dpkg -x dataset-fashion-mnist_*.deb fashion-mnist && rm -f dataset-fashion-mnist_*.deb)
  fi
fi
home=$cache/home
mkdir -p "$home/.torch/FashionMNIST/raw"
for f in "$fm"/*-ubyte.gz; do ln -sf "$f" "$home/.torch/FashionMNIST/raw/"; done

# robrank's venv: pytorch-lightning 1.6.3 (robrank's pin) needs pkg_resources (setuptools < 70).
venv=$cache/venv
if [[ ! -f $venv/.ready ]]; then
  # Only a venv this script began (its mark inside) is replaced.
  if [[ -e $venv ]]; then
    [[ -f $venv/.rdml-crosscheck ]] || { echo "$venv exists and was not made by this script; move it away" >&2; exit 2; }
    rm -rf "$venv"
  fi
  python3 -m venv "$venv"
  touch "$venv/.rdml-crosscheck"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [[ -x $py_venv/bin/python ]] && "$py_venv/bin/python" -c 'import torch, torchvision' 2> /dev/null; then
    "$py_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/zz_rdml_torch.pth"
  else
    "$venv/bin/pip" install -q torch torchvision
  fi
  "$venv/bin/pip" install -q pytorch-lightning==1.6.3 rich termcolor psutil matplotlib pandas joblib timm
  "$venv/bin/pip" install -q --no-deps "setuptools<70"
  "$venv/bin/python" -c 'import sys; sys.path.insert(0, sys.argv[1]); import robrank' "$src"
  touch "$venv/.ready"
fi
py=$venv/bin/python

run=$cache/runs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$run"
cd "$run"
echo "== run folder: $run"
cpu() { # wall and CPU seconds of a command (children included), appended to $run/times
  local label=$1 t0 c0
  shift
  t0=$(date +%s.%N)
  c0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  "$@"
  awk -v l="$label" -v t0="$t0" -v t1="$(date +%s.%N)" -v c0="$c0" -v hz="$(getconf CLK_TCK)" \
    -v c1="$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)" \
    'BEGIN { printf "%s %.1f %.1f\n", l, t1 - t0, (c1 - c0) / hz }' >> "$run/times"
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
