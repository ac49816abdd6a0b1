#!/usr/bin/env bash
# The GPU report: what accel-ngp does on a CUDA GPU, in two device-tool calls of under 10 minutes each.
#
# Here (this machine reaches the package registry), once:
#     bash benchmarks/gpu_lego.sh prepare        # fills .gpu/ (gitignored): the GPU machine's missing wheels, lego
# There, through the device tool's `run` with carry [".gpu"]:
#     bash benchmarks/gpu_report.sh checks       # ~5 min
#   installs (gpu_lego.sh install: wheels, this checkout, nerfacc's CUDA ops patched for CUDA 13 and built),
#   runs every CUDA-only test (Triton vs torch parity for the hash encoding and the marcher, nerfacc parity,
#   fp16 + hard mining, CPU checkpoints opened on CUDA, device choices), then profiles accel-ngp training
#   steps on lego 400x400 for both samplers (benchmarks/step_ops.py: ATen ops, syncs CUDA reports, kernels
#   launched and the top kernels by CUDA time per step) and times each phase of a step with hard mining on and
#   off (benchmarks/step_profile.py).
#     bash benchmarks/gpu_report.sh bench        # ~9 min with BUDGET=45
#   installs the same way, then ns-accel-bench at an equal training-time budget (BUDGET seconds, default 45)
#   on lego 400x400: accel-ngp (defaults), accel-ngp on the torch backends, nerfstudio's instant-ngp (on
#   nerfacc's ops) and nerfacto. METHODS replaces that list.
#     bash benchmarks/gpu_report.sh              # both, for a machine that allows longer calls
#   With 15 device-minutes a session, run both in one call with a shorter bench (491 s on an H200, 2026-11-26):
#     BUDGET=30 METHODS="accel-ngp,instant-ngp" timeout -k 5 545 bash benchmarks/gpu_report.sh all
# Each call writes $OUT/report.md (device, versions, the exact command, the results) and its logs. Commit the
# reports under docs/results/gpu/<date>/ with the command that made them.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?run this through the device tool, which sets OUT}"
GPU_DIR=.gpu
part=${1:-all}
case "$part" in checks|bench|all) ;; *) echo "usage: bash benchmarks/gpu_report.sh [checks|bench]" >&2; exit 2 ;; esac
report="$OUT/report.md"
status=0
started=$(date +%s)

bash benchmarks/gpu_lego.sh install > "$OUT/install.log" 2>&1 || { tail -n 20 "$OUT/install.log"; exit 1; }
{
    echo "# GPU report: $part"
    echo
    echo "Command: \`bash benchmarks/gpu_report.sh ${1:-}\` (BUDGET=${BUDGET:-45}) at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)."
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 - <<'EOF'
import importlib.metadata as metadata, platform, torch
versions = {name: metadata.version(name) for name in ("torch", "triton", "nerfacc", "nerfstudio", "numba")}
print("python", platform.python_version(), "| CUDA", torch.version.cuda, "|", ", ".join(f"{k} {v}" for k, v in versions.items()))
from nerfstudio_accel.ops import backends
for device in ("cuda",):
    print("sampler backend auto ->", backends.resolve_sampler_backend("auto", device),
          "| hash backend auto ->", backends.resolve_hash_backend("auto", device),
          "| nerfacc ops:", backends.nerfacc_ops_unavailable_reason() or "loaded")
EOF
    echo '```'
} > "$report" 2>> "$OUT/install.log"

if [ "$part" != bench ]; then
    echo "## CUDA-only tests" >> "$report"
    python3 -m pytest -q -p no:cacheprovider -rs tests/kernels/test_hash_encoding_triton.py tests/kernels/test_marching_triton.py \
        tests/ops tests/engine/test_cuda_paths.py tests/engine/test_device_choices.py \
        > "$OUT/gpu_tests.log" 2>&1 || status=1
    { echo '```'; tail -n 15 "$OUT/gpu_tests.log"; echo '```'; echo; } >> "$report"

    echo "## One training step, profiled" >> "$report"
    python3 benchmarks/step_ops.py --device cuda --data "$GPU_DIR/lego" --downscale 1 --json "$OUT/step_ops.json" \
        --markdown "$OUT/step_ops.md" > "$OUT/step_ops.log" 2>&1 || { status=1; tail -n 20 "$OUT/step_ops.log"; }
    cat "$OUT/step_ops.md" >> "$report" 2>/dev/null

    echo "## Where a step's time goes, hard mining on and off" >> "$report"
    python3 benchmarks/step_profile.py --device cuda --data "$GPU_DIR/lego" --downscale 1 --json "$OUT/step_profile.json" \
        --markdown "$OUT/step_profile.md" > "$OUT/step_profile.log" 2>&1 || { status=1; tail -n 20 "$OUT/step_profile.log"; }
    cat "$OUT/step_profile.md" >> "$report" 2>/dev/null
fi

if [ "$part" != checks ]; then
    echo "## Equal training time on lego 400x400 (${BUDGET:-45} s each)" >> "$report"
    methods=${METHODS:-"accel-ngp,accel-ngp:--pipeline.model.hash-backend torch --pipeline.model.occupancy.backend torch,instant-ngp,nerfacto"}
    python3 -m nerfstudio_accel.bench.cli --data "$GPU_DIR/lego" --device cuda --overwrite --out /tmp/bench \
        --budget-seconds "${BUDGET:-45}" --eval-points 2 --eval-views 5 --methods "$methods" \
        > "$OUT/bench.log" 2>&1 || status=1
    cp /tmp/bench/results.json /tmp/bench/psnr_vs_time.png "$OUT"/ 2>/dev/null
    tar czf "$OUT/bench_logs.tar.gz" -C /tmp/bench logs 2>/dev/null
    cat /tmp/bench/results.md >> "$report" 2>/dev/null || tail -n 30 "$OUT/bench.log" >> "$report"
fi

echo "Finished in $(( $(date +%s) - started )) s, exit status $status." >> "$report"
cat "$report"
exit "$status"
