# Sourced by bench/robrank_crosscheck.sh, bench/robrank_defense_crosscheck.sh and
# bench/est_lightning.sh: robrank's source (ROBRANK_CHECKOUT, $1, else cloned at the pinned
# commit), Fashion-MNIST where robrank reads it, robrank's venv, a new run folder (the working
# folder after it) and `cpu LABEL CMD…`, which appends the wall and CPU seconds of CMD to
# $run/times.

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${RDML_ROBRANK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdml/robrank}
src=${1:-$cache/src}
pinned=38ec207bc4
py_venv=${RDML_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdml/py-venv}
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
  "$venv/bin/pip" install -q pytorch-lightning==1.6.3 rich termcolor psutil matplotlib pandas joblib timm \
    scikit-learn pytorch-metric-learning
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

