#!/usr/bin/env bash
# ns-accel-bench on the lent GPU machine: lego at 400x400, accel-ngp against nerfstudio's instant-ngp.
#
# Here (this machine reaches the package registry):
#     bash benchmarks/gpu_lego.sh prepare
#   fills .gpu/ (gitignored, ~41 MB): the wheels the GPU machine lacks (../shared/gpu/wheelhouse.sh)
#   and a copy of the lego scene, since ../shared does not travel.
# There, through the device tool's `run` with carry [".gpu"]:
#     bash benchmarks/gpu_lego.sh run
#   installs the wheels and this checkout, builds nerfacc's CUDA ops once (the bench's first nerfacc
#   user would otherwise pay for the build inside its budget), runs the bench and leaves results.json,
#   results.md, psnr_vs_time.png and logs.tar.gz in $OUT. BUDGET (s), EVAL_POINTS and METHODS
#   override the defaults; keep the whole run inside the tool's 10 minutes per command.
#     bash benchmarks/gpu_lego.sh install
#   only installs (benchmarks/gpu_report.sh starts with it).
#     bash benchmarks/gpu_lego.sh checks
#   installs the same way, builds nerfacc's CUDA ops, runs the tests that need a GPU (nerfacc parity,
#   fp16 + hard mining, CPU checkpoints opened on CUDA), then trains accel-ngp on lego for STEPS (2000)
#   with --precision auto and scores it with ns-eval; logs and eval.json land in $OUT.
#     bash benchmarks/gpu_lego.sh parity
#   installs the same way and runs only the nerfacc-CUDA vs torch parity tests.
#     bash benchmarks/gpu_lego.sh scaling
#   installs the same way, then trains accel-ngp on lego for STEPS (1000) steps with
#   --machine.num-devices 1, 2, 4, 8 (those the machine has; RANKS overrides) and, on one GPU, with
#   --pipeline.datamanager.prefetch-batches 0 and 2; scaling.md in $OUT gives each run's median
#   Train Rays / Sec (global, all ranks), ms per step and input stall from its tensorboard events.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU_DIR=.gpu
case "${1:-}" in
prepare)
    bash ../shared/gpu/wheelhouse.sh "$GPU_DIR/wheels"
    rm -rf "$GPU_DIR/lego"
    cp -r "${LEGO:-../shared/data/lego}" "$GPU_DIR/lego"
    du -sh "$GPU_DIR"
    ;;
install|run|checks|parity|scaling)
    : "${OUT:?run this through the device tool, which sets OUT}"
    python3 -m pip install --quiet --no-index --no-deps "$GPU_DIR"/wheels/*.whl
    python3 -m pip install --quiet --no-deps --no-build-isolation -e .
    # nerfacc 0.5.2's scan.cu calls cub::Equality, which CUDA 13's CUB removed: on that toolkit, patch the
    # installed copy (this machine only) to the standard equal_to so nerfacc's ops build.
    if nvcc --version | grep -q "release 1[3-9]"; then
        scan=$(python3 -c "import nerfacc, os; print(os.path.dirname(nerfacc.__file__))")/cuda/csrc/scan.cu
        sed -i 's/cub::Equality()/cuda::std::equal_to<>()/; s|#include <thrust/iterator/reverse_iterator.h>|&\n#include <cuda/std/functional>|' "$scan"
        echo "patched $scan for CUDA 13 (cub::Equality -> cuda::std::equal_to<>)"
    fi
    python3 -c "from nerfstudio_accel.ops.backends import nerfacc_ops_unavailable_reason as why; print(why() or 'nerfacc CUDA ops: loaded')"
    ;;&
install)
    ;;
parity)
    python3 -m pytest -q -p no:cacheprovider tests/ops/test_nerfacc_cuda_parity.py 2>&1 | tee "$OUT/parity.log" | tail -n 15
    ;;
checks)
    status=0
    python3 -m pytest -q -p no:cacheprovider tests/ops/test_nerfacc_cuda_parity.py tests/engine/test_cuda_paths.py \
        tests/engine/test_device_choices.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25 || status=1
    ns-train accel-ngp --machine.device-type cuda --vis tensorboard --max-num-iterations "${STEPS:-2000}" \
        --steps-per-eval-image 100000 --steps-per-eval-batch 100000 --output-dir /tmp/gpu-run --experiment-name lego \
        --timestamp run blender-data --data "$GPU_DIR/lego" > "$OUT/train.log" 2>&1 || status=1
    grep -E "Training precision|hard mining, step|Train Iter" "$OUT/train.log" | tail -n 8
    ns-eval --load-config /tmp/gpu-run/lego/accel-ngp/run/config.yml --output-path "$OUT/eval.json" > "$OUT/eval.log" 2>&1 || status=1
    cp /tmp/gpu-run/lego/accel-ngp/run/config.yml "$OUT/config.yml" 2>/dev/null || true
    python3 -c "import json; r = json.load(open('$OUT/eval.json'))['results']; print(f\"lego accel-ngp on cuda: PSNR {r['psnr']:.2f} dB, SSIM {r['ssim']:.3f}, {r['num_rays_per_sec']:.0f} rays/s eval\")" || status=1
    exit "$status"
    ;;
scaling)
    gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
    echo "| run | median Train Rays / Sec (all ranks) | median ms/step | median input stall |" > "$OUT/scaling.md"
    echo "|---|---:|---:|---:|" >> "$OUT/scaling.md"
    train() {  # name, then ns-train flags
        name=$1; shift
        ns-train accel-ngp --machine.device-type cuda --vis tensorboard --max-num-iterations "${STEPS:-1000}" \
            --steps-per-eval-image 100000 --steps-per-eval-batch 100000 --steps-per-save 100000 \
            --output-dir /tmp/scaling --experiment-name lego --timestamp "$name" "$@" \
            blender-data --data "$GPU_DIR/lego" > "$OUT/$name.log" 2>&1 || echo "$name failed: see $name.log"
        python3 benchmarks/tensorboard_medians.py "/tmp/scaling/lego/accel-ngp/$name" "$name" >> "$OUT/scaling.md"
    }
    train prefetch0 --pipeline.datamanager.prefetch-batches 0
    train prefetch2 --pipeline.datamanager.prefetch-batches 2
    for ranks in ${RANKS:-1 2 4 8}; do
        if [ "$ranks" -le "$gpus" ]; then train "ranks$ranks" --machine.num-devices "$ranks"; fi
    done
    cat "$OUT/scaling.md"
    ;;
run)
    status=0
    python3 -m nerfstudio_accel.bench.cli --data "$GPU_DIR/lego" --device cuda --overwrite --out /tmp/bench \
        --budget-seconds "${BUDGET:-60}" --eval-points "${EVAL_POINTS:-3}" \
        --methods "${METHODS:-accel-ngp,accel-ngp:--pipeline.hard-mining=False,instant-ngp}" || status=$?
    cp /tmp/bench/results.json /tmp/bench/results.md /tmp/bench/psnr_vs_time.png "$OUT"/
    tar czf "$OUT/logs.tar.gz" -C /tmp/bench logs
    exit "$status"
    ;;
*)
    echo "usage: bash benchmarks/gpu_lego.sh prepare|install|run|checks|parity|scaling (see the comment at the top)" >&2
    exit 2
    ;;
esac
