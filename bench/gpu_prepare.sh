#!/usr/bin/env bash
# Prepares what bench/gpu.sh needs on a GPU machine that has no Rust and no network, in the
# git-ignored folder .gpu/: the rdml binary built with both GPU routes (stripped and
# xz-compressed), the Vulkan loader's Debian package, and Fashion-MNIST when this machine has it
# (30 MB); within the device tool's 64 MiB with the repository.
# Run on the build machine, from anywhere: bench/gpu_prepare.sh [FASHION_DIR] [FEATURES]
# (FEATURES: vulkan,cuda, the default; add gpu-autotune for burn's kernel autotuning)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-/usr/share/datasets/fashion-mnist}
features=${2:-vulkan,cuda}
cargo build --release --features "$features" --bin rdml
rm -rf .gpu && mkdir -p .gpu
cp target/release/rdml .gpu/rdml
strip .gpu/rdml
xz -T0 -6 .gpu/rdml
echo "$features" > .gpu/features
(cd .gpu && apt-get download libvulkan1 2>/dev/null) || echo "note: no libvulkan1 .deb fetched; the GPU machine must have libvulkan.so.1"
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    mkdir -p .gpu/fashion-mnist && cp "$data"/train-*-ubyte.gz "$data"/t10k-*-ubyte.gz .gpu/fashion-mnist/
else
    echo "note: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist): the epoch workload will be skipped"
fi
du -sh .gpu
