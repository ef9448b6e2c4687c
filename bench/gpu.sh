#!/usr/bin/env bash
# rdml on CUDA and on Vulkan against PyTorch (CUDA) on one NVIDIA GPU, same machine, same run.
# Needs what bench/gpu_prepare.sh puts in .gpu/ (no Rust on the GPU machine), nvidia-smi, and a
# Python with PyTorch (CUDA) and NumPy. PyTorch runs twice: with its own TF32 defaults (cuDNN
# convolutions in TF32, matmuls in FP32) and with TF32 matmuls too (as rdml's CUDA route does).
# Usage: bash bench/gpu.sh [DIR=.gpu] [STEPS=5] [PYTHON=python3] [DEVICES="cuda vulkan"]
# Environment:
#   WORKLOADS   which, in this order (default: all, most wanted first):
#               "torch-route tests resnet18-act resnet18 profile oom c2f2-act epoch rob224"
#   BUDGET      seconds for the whole run: a measurement gets what is left, one that cannot start
#               is skipped, and the table is printed in time. Default 540 when $OUT is set (the
#               device tool's 600 s limit per command), else none (0).
#   LIMIT       seconds one measurement may take (default 240)
#   TORCH_DEVICE  PyTorch's device (default cuda)
# With the device tool: run `bash bench/gpu.sh .gpu` with `.gpu` in carry. Results go to
# bench/out/gpu/; when $OUT is set, the log is $OUT/gpu.log and the folder is packed into
# $OUT/gpu.tgz after every workload, so a run stopped at its limit still brings back what it did.
# Workloads (bench/README.md "On a GPU"): the GPU equivalence tests; a ResNet-18 ACT step (32 PGD
# steps) and a ResNet-18 training step at 224x224, batch 112; per-kernel GPU time of that ACT
# step (cubecl's profiler); a batch too large for the card (exit 1 with the out-of-memory
# advice, no panic); one ACT step of C2F2 at 32 PGD steps; one epoch of
# fashion-c2f2-triplet; the rob224 suite on 512 queries of the synthetic 3x224x224 set. Each runs
# rdml on the first device, then PyTorch, then rdml on the other devices, so a budget cut loses
# the slower route's figure first. Peak GPU memory is nvidia-smi's memory.used sampled every
# 100 ms, minus the reading before the workload, for both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}; steps=${2:-5}; py=${3:-python3}; devices=${4:-cuda vulkan}
workloads=${WORKLOADS:-torch-route tests resnet18-act resnet18 profile oom c2f2-act epoch rob224}
budget=${BUDGET:-$([ -n "${OUT:-}" ] && echo 540 || echo 0)}
limit=${LIMIT:-240}
torch_device=${TORCH_DEVICE:-cuda}
first=${devices%% *}; others=${devices#"$first"}
out=bench/out/gpu; rm -rf "$out"; mkdir -p "$out"
[ -n "${OUT:-}" ] && exec > >(tee -a "$OUT/gpu.log") 2>&1
start=$SECONDS

unpack_xz() { python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"; chmod +x "$2"; }
bin=/tmp/rdml-gpu
unpack_xz "$dir/rdml.xz" $bin
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
$bin devices | tee "$out/devices.txt"

# left: the seconds the next measurement may take (LIMIT, or what BUDGET leaves); 0 when too few.
left() {
    local t=$limit
    if [ "$budget" -gt 0 ]; then
        local r=$((budget - (SECONDS - start) - 15))
        [ $r -lt "$t" ] && t=$r
    fi
    [ "$t" -lt 10 ] && t=0
    echo $t
}
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 || true; }
# pack: the results so far into $OUT (written aside, then renamed: never half a file).
pack() {
    [ -n "${OUT:-}" ] || return 0
    python3 "bench/gpu_summary.py" "$out" "$devices" --quiet || true
    tar czf "$OUT/gpu.tgz.tmp" -C bench/out --exclude='*.safetensors' --exclude='*.bpk' --exclude=report.html \
        --exclude=grid.json gpu &&
        mv "$OUT/gpu.tgz.tmp" "$OUT/gpu.tgz"
}
# measure NAME CMD...: wall seconds, exit status and peak memory (MiB above the idle reading) of
# CMD, stopped at what left() gives; one line says how it went.
measure() {
    local name=$1; shift
    local t; t=$(left)
    last_rc=skipped
    if [ "$t" = 0 ]; then echo "$name: skipped, BUDGET=$budget s spent"; return; fi
    local base; base=$(used)
    local smi=
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem" &
        smi=$!
    fi
    local s; s=$(date +%s.%N)
    local rc=0
    timeout -k 5 "$t" "$@" > "$out/$name.out" 2> "$out/$name.err" || rc=$?
    last_rc=$rc
    local e; e=$(date +%s.%N)
    if [ -n "$smi" ]; then kill $smi; wait $smi 2>/dev/null || true; fi
    python3 - "$name" "$s" "$e" "${base:-}" "$out" "$rc" "$t" <<'PY'
import json, os, sys
name, s, e, base, out, rc, t = sys.argv[1:8]
wall, rc = float(e) - float(s), int(rc)
mem_file = f"{out}/{name}.mem"
mem = [float(l) for l in open(mem_file) if l.strip()] if os.path.exists(mem_file) else []
peak = max(mem) - float(base) if mem and base else None
json.dump({"wall_s": wall, "peak_mib": peak, "rc": rc}, open(f"{out}/{name}.json", "w"))
state = "ok" if rc == 0 else f"stopped at its limit of {t} s" if rc in (124, 137) else f"failed (exit {rc})"
print(f"{name}: {state}, {wall:.1f} s wall" + (f", peak {peak:.0f} MiB" if peak is not None else ""), flush=True)
PY
    [ "$rc" = 0 ] || tail -5 "$out/$name.err" | sed 's/^/    /'
}

tests() {
    [ -f "$dir/gpu-tests.xz" ] || { echo "no $dir/gpu-tests.xz: equivalence tests skipped"; return; }
    unpack_xz "$dir/gpu-tests.xz" /tmp/rdml-gpu-tests
    # Each GPU route against the CPU (tests/vulkan.rs, relative error <= 1e-3), one test at a
    # time; the test that runs the rdml binary by its build path cannot run here.
    for d in $devices; do
        RDML_GPU=$d measure "tests-$d" /tmp/rdml-gpu-tests --test-threads=1 --skip a_missing_driver_or_adapter
        grep -E "^test |test result" "$out/tests-$d.out" | sed "s/^/    $d: /" || true
    done
}

# torch NAME ARGS...: PyTorch's side of workload NAME in both TF32 modes.
torch() {
    local name=$1; shift
    for tf in default on; do
        measure "torch-$tf-$name" bash -c "cd bench && $py torch_gpu.py --device $torch_device --tf32 $tf $* --json ../$out/torch-$tf-$name-r.json"
    done
}

step_args() {
    case $1 in
        c2f2-act) args=(--config fashion-c2f2-act)
            if [ -d "$dir/fashion-mnist" ]; then args+=(--set "data.root=\"$dir/fashion-mnist\""); else args+=(--random-images 1,28,28); fi ;;
        resnet18) args=(--config fashion-c2f2-triplet --random-images 3,224,224 --set 'model.arch="resnet18"'
            --set 'train.sampler={kind="spc2",pairs=56}') ;;
        resnet18-act) step_args resnet18
            args+=(--defense '{kind="act",eps=0.031372549,step=0.003921569,steps=32}') ;;
    esac
}

step() {
    local w=$1 d
    step_args "$w"
    for d in $first TORCH $others; do
        if [ "$d" = TORCH ]; then torch "$w" --workloads "$w" --steps "$steps"; continue; fi
        measure "rdml-$d-$w" $bin bench-step "${args[@]}" --steps "$steps" --device "$d" --out "$out/rdml-$d-$w-r.json"
    done
}

# Where the GPU time of one ResNet-18 ACT step goes, kernel by kernel, on the first device.
# cubecl times each kernel on its own, which adds to the step: the shares count, not the total.
profile() {
    step_args resnet18-act
    local log=$out/profile-$first.log
    CUBECL_DEBUG_LOG=$log CUBECL_DEBUG_OPTION=profile measure "profile-$first" \
        $bin bench-step "${args[@]}" --steps 1 --device "$first"
    [ -f "$log" ] && python3 bench/gpu_profile.py "$log" 25 | tee "$out/profile-$first.txt" || true
}

# A ResNet-18 training step on 4,096 images of 224x224 (about 13 GB for the first convolution's
# output alone, hundreds for the step) must end with exit 1 and the out-of-memory advice.
oom() {
    local d
    for d in $devices; do
        measure "oom-$d" $bin bench-step --config fashion-c2f2-triplet --random-images 3,224,224 \
            --set 'model.arch="resnet18"' --set 'train.sampler={kind="spc2",pairs=2048}' --steps 1 --device "$d"
        [ "$last_rc" = skipped ] && continue
        if grep -q "^error: --device" "$out/oom-$d.err"; then
            echo "    oom-$d: no such device here"
        elif [ "$last_rc" = 1 ] && grep -q "lower the batch size" "$out/oom-$d.err"; then
            echo "    oom-$d: exit 1 with the advice, as it should"
        else
            echo "    oom-$d: NOT the out-of-memory advice (exit $last_rc)"
        fi
    done
}

epoch() {
    local fashion=$dir/fashion-mnist d
    [ -d "$fashion" ] || { echo "no $fashion (bench/gpu_prepare.sh FASHION_DIR): epoch skipped"; return; }
    for d in $first TORCH $others; do
        if [ "$d" = TORCH ]; then torch epoch --workloads epoch --data "../$fashion"; continue; fi
        measure "rdml-$d-epoch" $bin train --config fashion-c2f2-triplet --out "$out/epoch-run-$d" --epochs 1 \
            --device "$d" --quiet --set "data.root=\"$fashion\""
    done
}

rob224() {
    local d
    $bin train --config synthetic-two-gaussians --out "$out/synth-run" --epochs 1 --max-batches 2 --device cpu \
        --quiet --set model.embedding_dim=512 --set model.imagenet_norm=true > /dev/null
    for d in $first TORCH $others; do
        if [ "$d" = TORCH ]; then
            measure torch-default-rob224 bash -c "cd bench && $py torch_suite.py --arch resnet18 --synthetic 516 --profile rob224 --queries 512 --device $torch_device"
            continue
        fi
        measure "rdml-$d-rob224" $bin robustness --model "$out/synth-run" --profile rob224 --queries 512 --device "$d"
    done
}

# The PyTorch route (README "Score your own PyTorch model"): rdml's package, installed from the
# wheel gpu_prepare.sh built, on the GPU machine's own PyTorch, the model and its held batch on
# CUDA; each against the same loop written in plain PyTorch, both in one run, peak memory by
# `measure`: the near-zero-compute model's PGD step (bench/route.py, 224² batch 64 and 28² batch
# 256), a ResNet-18 ACT step of 8 and of 32 PGD steps through rdml.Defense (bench/defense_loop.py),
# and the rob224 suite through rdml.robustness on a ResNet-18 (bench/oracle.py: rdml's time over
# PyTorch's own forward and backward time of the same calls).
torch_route() {
    local whl; whl=$(ls "$dir"/wheel/rdml-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$whl" ]; then echo "    torch-route: no wheel in $dir/wheel (bench/gpu_prepare.sh builds it)"; return; fi
    rm -rf /tmp/rdml-py && $py -m pip install -q --no-deps --no-index --target /tmp/rdml-py "$whl"
    local pp="PYTHONPATH=/tmp/rdml-py"
    measure torch-route-pgd env $pp $py bench/route.py --device "$torch_device" --out "$out/torch-route-pgd.json"
    local k
    for k in 8 32; do
        measure "torch-route-act-$k" env $pp $py bench/defense_loop.py --arch resnet18 --pairs 56 --reps 5 \
            --pgd-steps "$k" --device "$torch_device" --json "$out/torch-route-act-$k.json"
    done
    measure torch-route-rob224 env $pp $py bench/oracle.py --arch resnet18 --size 224 --n 516 --queries 512 \
        --profile rob224 --device "$torch_device"
    for k in pgd act-8 act-32; do [ -f "$out/torch-route-$k.json" ] && cat "$out/torch-route-$k.json"; done
}

for w in $workloads; do
    echo "== $w ($((SECONDS - start)) s in)"
    case $w in
        torch-route) torch_route ;;
        tests) tests ;;
        c2f2-act | resnet18 | resnet18-act) step "$w" ;;
        profile) profile ;;
        oom) oom ;;
        epoch) epoch ;;
        rob224) rob224 ;;
        *) echo "unknown workload '$w' (WORKLOADS: torch-route tests resnet18-act resnet18 profile oom c2f2-act epoch rob224)"; exit 2 ;;
    esac
    pack
done
echo "== table ($((SECONDS - start)) s in)"
python3 bench/gpu_summary.py "$out" "$devices"
pack
