#!/usr/bin/env bash
# Fresh machine -> a trained, scored accel-ngp: install, generate a synthetic scene, train on the
# device that is here (CUDA if available, else CPU), ns-eval on the held-out test views, print PSNR.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
OUT="${OUT:-outputs/demo}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"  # PyTorch's OpenMP threads leave the cores to CPU kernels (docs/trainer.md)
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e .

DEVICE=$("$VENV/bin/python" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
if [ "$DEVICE" = cuda ]; then ITERATIONS="${ITERATIONS:-3000}"; else ITERATIONS="${ITERATIONS:-500}"; fi

"$VENV/bin/ns-accel-scene" "$OUT/scene" --force
"$VENV/bin/ns-train" accel-ngp --machine.device-type "$DEVICE" --vis tensorboard \
    --max-num-iterations "$ITERATIONS" --steps-per-eval-image 100000 --steps-per-eval-batch 100000 \
    --output-dir "$OUT" --experiment-name demo --timestamp run --overwrite-checkpoints True \
    blender-data --data "$OUT/scene"
"$VENV/bin/ns-eval" --load-config "$OUT/demo/accel-ngp/run/config.yml" --output-path "$OUT/eval.json"
"$VENV/bin/python" - "$OUT/eval.json" "$DEVICE" "$ITERATIONS" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
print(f"accel-ngp demo on {sys.argv[2]}, {sys.argv[3]} steps: test PSNR {results['psnr']:.2f} dB, "
      f"SSIM {results['ssim']:.3f}  (details: {sys.argv[1]})")
PY
