#!/usr/bin/env bash
# Prepares what bench/gpu.sh needs on a GPU machine that has no Rust and no network, in the
# git-ignored folder .gpu/: the rdml binary built with both GPU routes and the GPU equivalence
# tests (tests/vulkan.rs, run there on CUDA and on Vulkan), each stripped and xz-compressed, the
# Vulkan loader's Debian package, and Fashion-MNIST when this machine has it (30 MB; pass - as
# FASHION_DIR to leave it out and stay well inside the device tool's 64 MiB).
# Run on the build machine, from anywhere: bench/gpu_prepare.sh [FASHION_DIR] [FEATURES]
# (FEATURES: vulkan,cuda, the default; add gpu-autotune for burn's kernel autotuning)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-/usr/share/datasets/fashion-mnist}
features=${2:-vulkan,cuda}
cargo build --release --features "$features" --bin rdml
tests=$(cargo test --release --features "$features" --no-run --test vulkan --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "vulkan" and m.get("executable"):
        print(m["executable"])')
rm -rf .gpu && mkdir -p .gpu
cp target/release/rdml .gpu/rdml
cp "$tests" .gpu/gpu-tests
strip .gpu/rdml .gpu/gpu-tests
xz -T0 -6 .gpu/rdml .gpu/gpu-tests
echo "$features" > .gpu/features
# rdml's Python package for the PyTorch route (bench/gpu.sh torch-route): the abi3 wheel, CPU
# build (the model side is torch: a model on a GPU needs no CUDA build of rdml).
${PYTHON:-python3} -m maturin build --release -m python/Cargo.toml --out .gpu/wheel --compatibility linux -q \
    || echo "note: no wheel built (pip install maturin): the torch-route workload will be skipped"
(cd .gpu && apt-get download libvulkan1 2>/dev/null) || echo "note: no libvulkan1 .deb fetched; the GPU machine must have libvulkan.so.1"
if [ "$data" != - ] && [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    mkdir -p .gpu/fashion-mnist && cp "$data"/train-*-ubyte.gz "$data"/t10k-*-ubyte.gz .gpu/fashion-mnist/
else
    echo "note: no Fashion-MNIST from '$data' (apt-get install dataset-fashion-mnist): the epoch workload will be skipped"
fi
du -sh .gpu
