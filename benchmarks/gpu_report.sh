#!/usr/bin/env bash
# The GPU report: what accel-ngp does on this machine's CUDA GPU, written to one markdown file.
#
# Run it from a checkout where the package is installed (`pip install -e ".[test]"`: the checks part runs the
# CUDA-only tests with pytest), on a machine with an NVIDIA GPU and a CUDA build of torch:
#
#     ns-download-data blender                    # once: writes data/blender/lego
#     bash benchmarks/gpu_report.sh [PART]        # PART: checks | train | bench | scaling | all (default all)
#
#   checks   every CUDA-only test (Triton against torch for the hash encoding and the marcher, nerfacc's CUDA ops
#            against their torch twins, fp16 with hard mining, CPU checkpoints opened on CUDA, device choices),
#            then one training step profiled (benchmarks/step_ops.py: ATen ops, syncs, kernels launched, the top
#            kernels) and timed phase by phase with hard mining on and off (benchmarks/step_profile.py)
#   train    accel-ngp trained STEPS steps with ns-train (precision auto: fp16 on CUDA), scored by ns-eval
#   bench    ns-accel-bench at an equal training time of BUDGET seconds per method: accel-ngp, accel-ngp on its
#            torch backends, nerfstudio's instant-ngp (on nerfacc's CUDA ops) and nerfacto
#   scaling  accel-ngp for STEPS steps with the input pipeline off and on (prefetch 0 and 2), then on 1, 2, 4, 8
#            GPUs (those visible): median rays/s, ms/step and input stall of each run
#   all      checks, train and bench
#
# Settings (environment variables):
#   DATA       scene folder (default data/blender/lego; any format ns-accel-bench reads)
#   DOWNSCALE  image downscale (default 2: the downloaded 800x800 lego at 400x400, the size of the published GPU
#              results); ns-train gets it as --pipeline.datamanager.camera-res-scale-factor 1/DOWNSCALE
#   OUT        report folder (default outputs/gpu_report/<UTC date-time>; DATA and OUT are relative to the
#              folder you run from)
#   BUDGET     seconds of training per method in the bench (default 45)
#   METHODS    the bench's --methods list (default: the four above)
#   STEPS      steps of the train part (default 2000) and of each scaling run (default 1000)
#   RANKS      GPU counts the scaling part tries (default "1 2 4 8")
#
# It writes OUT/report.md (GPU, driver, versions, commit, date, the exact command, then each part's results) and
# each part's log beside it. The exit status is 0 only when every part it ran succeeded. nerfacc compiles its CUDA
# ops on first use (minutes; the header line waits for it). Where they do not build (nerfacc 0.5.2 against CUDA 13),
# the header says why, their parity tests skip, and instant-ngp cannot run: leave it out of METHODS there.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd) || exit 1

usage="usage: bash benchmarks/gpu_report.sh [checks|train|bench|scaling|all]"
part=${1:-all}
case "$part" in checks|train|bench|scaling|all) ;; *) echo "$usage" >&2; exit 2 ;; esac
[ $# -le 1 ] || { echo "$usage" >&2; exit 2; }

DATA=${DATA:-data/blender/lego}
DOWNSCALE=${DOWNSCALE:-2}
BUDGET=${BUDGET:-45}
METHODS=${METHODS:-"accel-ngp,accel-ngp:--pipeline.model.hash-backend torch --pipeline.model.occupancy.backend torch,instant-ngp,nerfacto"}
RANKS=${RANKS:-"1 2 4 8"}
OUT=${OUT:-outputs/gpu_report/$(date -u +%Y-%m-%d_%H%M%S)}

fail() { echo "error: $*" >&2; exit 1; }

if [ ! -d "$DATA" ]; then
    if [ "$DATA" = data/blender/lego ]; then
        fail "scene folder $DATA does not exist; download it with \`ns-download-data blender\`, or set DATA=<scene folder>"
    fi
    fail "scene folder $DATA does not exist; set DATA=<scene folder>"
fi
command -v python3 > /dev/null || fail "python3 not found; activate the environment where the package is installed"
scale=$(python3 -c 'import sys; d = float(sys.argv[1]); assert d >= 1; print(1 / d)' "$DOWNSCALE" 2> /dev/null) ||
    fail "DOWNSCALE must be a number of at least 1, got '$DOWNSCALE'"
# One line on stderr and a non-zero exit unless torch sees a CUDA GPU.
python3 - <<'EOF' || exit 1
import sys
try:
    import torch
    import nerfstudio_accel  # noqa: F401
except ImportError as error:
    sys.exit(f"error: {error}; activate the environment where you ran pip install -e . in this checkout")
if torch.version.cuda is None:
    sys.exit(f"error: torch {torch.__version__} is a CPU-only build; install a CUDA build of torch to make this report")
if not torch.cuda.is_available():
    sys.exit("error: no CUDA GPU visible (torch.cuda.is_available() is False; check nvidia-smi and CUDA_VISIBLE_DEVICES)")
EOF
case "$part" in
checks|all) python3 -c "import pytest" 2> /dev/null || fail "pytest not installed; the checks run the CUDA-only tests: pip install -e \".[test]\"" ;;
esac

mkdir -p "$OUT" || exit 1
report="$OUT/report.md"
status=0
started=$(date +%s)
if [ -f "$DATA/transforms_train.json" ]; then dataparser=blender-data
elif [ -f "$DATA/transforms.json" ]; then dataparser=nerfstudio-data
else dataparser=colmap
fi
settings="DATA=$(printf %q "$DATA") DOWNSCALE=$DOWNSCALE"
case "$part" in bench|all) settings+=" BUDGET=$BUDGET METHODS=\"$METHODS\"" ;; esac
case "$part" in train|all) settings+=" STEPS=${STEPS:-2000}" ;; esac
case "$part" in scaling) settings+=" STEPS=${STEPS:-1000} RANKS=\"$RANKS\"" ;; esac

{
    echo "# GPU report: $part"
    echo
    echo "Command: \`$settings bash benchmarks/gpu_report.sh $part\`"
    echo
    echo "Commit $(git -C "$repo" describe --always --dirty 2> /dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)."
    echo
    echo '```'
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    else
        echo "nvidia-smi not found: driver version unknown"
    fi
    python3 - <<'EOF'
import importlib.metadata as metadata
import platform

import torch

from nerfstudio_accel.ops import backends


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


names = ("torch", "triton", "nerfacc", "nerfstudio", "numba", "nerfstudio-accel")
print(f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} visible to torch")
print("python", platform.python_version(), "| CUDA", torch.version.cuda, "|", ", ".join(f"{n} {version(n)}" for n in names))
print(
    "sampler backend auto ->", backends.resolve_sampler_backend("auto", "cuda"),
    "| hash backend auto ->", backends.resolve_hash_backend("auto", "cuda"),
    "| nerfacc CUDA ops:", backends.nerfacc_ops_unavailable_reason() or "loaded",
)
EOF
    echo '```'
    echo
} > "$report" 2> "$OUT/header.log" || { status=1; tail -n 5 "$OUT/header.log"; }

run_checks() {
    echo "## CUDA-only tests"
    python3 -m pytest -q -p no:cacheprovider -rs "$repo/tests/kernels/test_hash_encoding_triton.py" \
        "$repo/tests/kernels/test_marching_triton.py" "$repo/tests/ops" "$repo/tests/engine/test_cuda_paths.py" \
        "$repo/tests/engine/test_device_choices.py" > "$OUT/gpu_tests.log" 2>&1 || status=1
    echo '```'; tail -n 15 "$OUT/gpu_tests.log"; echo '```'; echo

    local script
    for script in step_ops step_profile; do
        if [ "$script" = step_ops ]; then echo "## One training step, profiled"
        else echo "## Where a step's time goes, hard mining on and off"
        fi
        if python3 "$repo/benchmarks/$script.py" --device cuda --data "$DATA" --downscale "$DOWNSCALE" \
            --json "$OUT/$script.json" --markdown "$OUT/$script.md" > "$OUT/$script.log" 2>&1; then
            cat "$OUT/$script.md"
        else
            status=1; echo '```'; tail -n 20 "$OUT/$script.log"; echo '```'
        fi
        echo
    done
}

train() {  # run name, then ns-train flags: accel-ngp on DATA for STEPS steps under OUT/runs
    local name=$1; shift
    ns-train accel-ngp --machine.device-type cuda --vis tensorboard --max-num-iterations "$steps" \
        --steps-per-eval-image 100000 --steps-per-eval-batch 100000 \
        --pipeline.datamanager.camera-res-scale-factor "$scale" --output-dir "$OUT/runs" --experiment-name scene \
        --timestamp "$name" "$@" "$dataparser" --data "$DATA" > "$OUT/$name.log" 2>&1
}

run_train() {
    steps=${STEPS:-2000}
    echo "## accel-ngp, $steps steps, scored by ns-eval"
    local config="$OUT/runs/scene/accel-ngp/train/config.yml"
    if train train && ns-eval --load-config "$config" --output-path "$OUT/eval.json" > "$OUT/eval.log" 2>&1; then
        python3 - "$OUT/eval.json" "$OUT/train.log" <<'EOF' || status=1
import json, re, sys
results = json.load(open(sys.argv[1]))["results"]
print(f"Test views: PSNR {results['psnr']:.2f} dB, SSIM {results['ssim']:.3f}, {results['num_rays_per_sec']:.0f} rays/s rendering.")
lines = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*[A-Za-z]|\r", "", open(sys.argv[2]).read()).splitlines()]
notes = [line for line in lines if line.startswith("Training precision")][:1]
notes += [line for line in lines if line.startswith("hard mining, step")][-1:]
headers = [line for line in lines if line.startswith("Step (% Done)") and "Rays" in line][-1:]
rows = list(dict.fromkeys(line for line in lines if re.match(r"\d+ \(\d+\.\d+%\)", line)))[-5:]
print("\nThe end of training, from ns-train's output:\n\n```\n" + "\n".join(notes + headers + rows) + "\n```")
EOF
    else
        status=1; echo '```'; tail -n 20 "$OUT/train.log" "$OUT/eval.log" 2> /dev/null; echo '```'
    fi
    echo
}

run_bench() {
    echo "## Equal training time ($BUDGET s each), ns-accel-bench"
    if ns-accel-bench --data "$DATA" --downscale "$DOWNSCALE" --device cuda --budget-seconds "$BUDGET" \
        --eval-points 2 --eval-views 5 --methods "$METHODS" --out "$OUT/bench" --overwrite > "$OUT/bench.log" 2>&1; then
        cat "$OUT/bench/results.md"
    else
        status=1; echo '```'; tail -n 30 "$OUT/bench.log"; echo '```'
    fi
    echo
}

run_scaling() {
    steps=${STEPS:-1000}
    local gpus name ranks
    gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
    echo "## Input pipeline and GPU count, $steps steps each"
    echo
    echo "| run | median Train Rays / Sec (all ranks) | median ms/step | median input stall |"
    echo "|---|---:|---:|---:|"
    for name in prefetch0 prefetch2 $(for ranks in $RANKS; do [ "$ranks" -le "$gpus" ] && echo "ranks$ranks"; done); do
        case "$name" in
        prefetch*) train "$name" --pipeline.datamanager.prefetch-batches "${name#prefetch}" ;;
        ranks*) train "$name" --machine.num-devices "${name#ranks}" ;;
        esac || { status=1; echo "| $name | failed: see $name.log | | |"; continue; }
        python3 "$repo/benchmarks/tensorboard_medians.py" "$OUT/runs/scene/accel-ngp/$name" "$name" || status=1
    done
    echo
}

case "$part" in checks|all) run_checks >> "$report" ;; esac
case "$part" in train|all) run_train >> "$report" ;; esac
case "$part" in bench|all) run_bench >> "$report" ;; esac
case "$part" in scaling) run_scaling >> "$report" ;; esac

echo "Finished in $(( $(date +%s) - started )) s, exit status $status." >> "$report"
cat "$report"
echo "report: $report" >&2
exit "$status"
