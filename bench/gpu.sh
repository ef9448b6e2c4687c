#!/usr/bin/env bash
# rdml on CUDA and on Vulkan against PyTorch (CUDA) on one NVIDIA GPU, same machine, same run.
# Needs what bench/gpu_prepare.sh puts in .gpu/ (no Rust on the GPU machine), nvidia-smi, and a
# Python with PyTorch (CUDA) and NumPy. PyTorch runs twice: with its own TF32 defaults (cuDNN
# convolutions in TF32, matmuls in FP32) and with TF32 matmuls too (as rdml's CUDA route does).
# Usage: bash bench/gpu.sh [DIR=.gpu] [STEPS=5] [PYTHON=python3] [DEVICES="cuda vulkan"]
# With the device tool: run `bash bench/gpu.sh .gpu` with `.gpu` in carry.
# Workloads (README "GPU"): one epoch of fashion-c2f2-triplet; one ACT step of C2F2 at 32 PGD
# steps; a ResNet-18 training step and a 32-step ACT step at 224x224, batch 112; the rob224 suite
# on 512 queries of the synthetic 3x224x224 set. Peak GPU memory is nvidia-smi's memory.used
# sampled every 100 ms, minus the reading before the workload, for both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}; steps=${2:-5}; py=${3:-python3}; devices=${4:-cuda vulkan}
bin=/tmp/rdml-gpu
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$dir/rdml.xz" $bin
chmod +x $bin
if ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
    for f in "$dir"/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
# CUDA: NVRTC's library and the CUDA headers, from the toolkit or else PyTorch's nvidia wheels.
if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
    lib=$(ls -d /usr/local/cuda/lib64 2>/dev/null || true)
    [ -n "$lib" ] && ls "$lib"/libnvrtc.so* >/dev/null 2>&1 || lib=$(dirname "$($py -c "import glob, os, nvidia; print(sorted(glob.glob(os.path.join(nvidia.__path__[0], '**', 'libnvrtc.so*'), recursive=True))[0])" 2>/dev/null)" 2>/dev/null || true)
    [ -n "$lib" ] && export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ -z "${CUDA_PATH:-}" ] && [ ! -f /usr/local/cuda/include/cuda_fp16.h ] && command -v nvcc >/dev/null; then
    export CUDA_PATH=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
out=bench/out/gpu; rm -rf "$out"; mkdir -p "$out"
$bin devices | tee "$out/devices.txt"
# First the numbers: each GPU route against the CPU (tests/vulkan.rs, relative error ≤ 1e-3),
# one test at a time. The test that runs the rdml binary by its build path is skipped here.
if [ -f "$dir/gpu-tests.xz" ]; then
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$dir/gpu-tests.xz" /tmp/rdml-gpu-tests
    chmod +x /tmp/rdml-gpu-tests
    for d in $devices; do
        echo "equivalence tests on $d:"
        RDML_GPU=$d /tmp/rdml-gpu-tests --test-threads=1 --skip a_missing_driver_or_adapter 2>&1 | tee "$out/tests-$d.txt" | grep -E "^test |test result" || true
    done
fi

used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# measure NAME CMD...: wall seconds and peak memory (MiB above the idle reading) of CMD.
measure() {
    local name=$1; shift
    local base; base=$(used)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem" &
    local smi=$!
    local s; s=$(date +%s.%N)
    "$@" > "$out/$name.out" 2> "$out/$name.err" || { echo "$name failed:"; tail -20 "$out/$name.err"; }
    local e; e=$(date +%s.%N)
    kill $smi; wait $smi 2>/dev/null || true
    python3 - "$name" "$s" "$e" "$base" "$out" <<'PY'
import json, sys
name, s, e, base, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
mem = [float(l) for l in open(f"{out}/{name}.mem") if l.strip()]
json.dump({"wall_s": e - s, "peak_mib": max(mem, default=base) - base}, open(f"{out}/{name}.json", "w"))
PY
}

fashion="$dir/fashion-mnist"
if [ -d "$fashion" ]; then
    for d in $devices; do
        measure rdml-$d-epoch $bin train --config fashion-c2f2-triplet --out "$out/epoch-run-$d" --epochs 1 \
            --device $d --quiet --set "data.root=\"$fashion\""
    done
    for tf in default on; do
        measure torch-$tf-epoch bash -c "cd bench && $py torch_gpu.py --workloads epoch --tf32 $tf --data ../$fashion --json ../$out/torch-$tf-epoch-r.json"
    done
    data_arg=$fashion
else
    echo "no $fashion: epoch skipped, c2f2-act on random images"
    data_arg=-
fi
for w in c2f2-act resnet18 resnet18-act; do
    case $w in
        c2f2-act) args=(--config fashion-c2f2-act)
            if [ "$data_arg" = - ]; then args+=(--random-images 1,28,28); else args+=(--set "data.root=\"$data_arg\""); fi ;;
        resnet18) args=(--config fashion-c2f2-triplet --random-images 3,224,224 --set 'model.arch="resnet18"'
            --set 'train.sampler={kind="spc2",pairs=56}') ;;
        resnet18-act) args=(--config fashion-c2f2-triplet --random-images 3,224,224 --set 'model.arch="resnet18"'
            --set 'train.sampler={kind="spc2",pairs=56}' --defense '{kind="act",eps=0.031372549,step=0.003921569,steps=32}') ;;
    esac
    for d in $devices; do
        measure "rdml-$d-$w" $bin bench-step "${args[@]}" --steps "$steps" --device $d --out "$out/rdml-$d-$w-r.json"
    done
    for tf in default on; do
        measure "torch-$tf-$w" bash -c "cd bench && $py torch_gpu.py --workloads $w --tf32 $tf --steps $steps --json ../$out/torch-$tf-$w-r.json"
    done
done
$bin train --config synthetic-two-gaussians --out "$out/synth-run" --epochs 1 --max-batches 2 --device cpu \
    --quiet --set model.embedding_dim=512 --set model.imagenet_norm=true > /dev/null
for d in $devices; do
    measure rdml-$d-rob224 $bin robustness --model "$out/synth-run" --profile rob224 --queries 512 --device $d
done
measure torch-default-rob224 bash -c "cd bench && $py torch_suite.py --arch resnet18 --synthetic 516 --profile rob224 --queries 512 --device cuda"

python3 - "$out" "$devices" <<'PY'
import json, os, sys
out, devices = sys.argv[1], sys.argv[2].split()
def j(p):
    p = os.path.join(out, p)
    return json.load(open(p)) if os.path.exists(p) else None
def mem(key):
    return (j(f"{key}.json") or {}).get("peak_mib")
# (workload, rdml's value on device d, PyTorch's value with TF32 mode tf)
rows = []
for d in devices:
    for tf in ["default", "on"]:
        ep_r, ep_t = j(f"epoch-run-{d}/run.json"), j(f"torch-{tf}-epoch-r.json")
        if ep_r and ep_t:
            rows.append(("epoch fashion-c2f2-triplet (s)", d, tf, ep_r["epochs"][0]["seconds"], ep_t["epoch_seconds"], "epoch"))
        for w in ["c2f2-act", "resnet18", "resnet18-act"]:
            r, t = j(f"rdml-{d}-{w}-r.json"), j(f"torch-{tf}-{w}-r.json")
            if r and t:
                rows.append((f"{w} step (s)", d, tf, r["seconds_per_step"], t["seconds_per_step"][w], w))
        r, t = j(f"rdml-{d}-rob224.json"), j(f"torch-{tf}-rob224.json")
        if r and t:
            rows.append(("rob224 suite, 512 queries (s, wall)", d, tf, r["wall_s"], t["wall_s"], "rob224"))
res = []
print(f"{'workload':<38} {'rdml on':>8} {'torch TF32':>10} {'rdml':>9} {'PyTorch':>9} {'ratio':>6} {'rdml MiB':>9} {'torch MiB':>9}")
for name, d, tf, a, b, key in rows:
    ma, mb = mem(f"rdml-{d}-{key}"), mem(f"torch-{tf}-{key}")
    print(f"{name:<38} {d:>8} {tf:>10} {a:>9.4f} {b:>9.4f} {a / b:>6.2f} {ma or 0:>9.0f} {mb or 0:>9.0f}")
    res.append({"workload": name, "rdml_device": d, "pytorch_tf32": tf, "rdml": a, "pytorch": b,
                "ratio": a / b, "rdml_peak_mib": ma, "pytorch_peak_mib": mb})
json.dump(res, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
