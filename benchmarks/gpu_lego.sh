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
run)
    : "${OUT:?run this through the device tool, which sets OUT}"
    python3 -m pip install --quiet --no-index --no-deps "$GPU_DIR"/wheels/*.whl
    python3 -m pip install --quiet --no-deps --no-build-isolation -e .
    python3 -c "from nerfstudio_accel.sampling.occupancy import nerfacc_ops_unavailable_reason as why; print(why() or 'nerfacc CUDA ops: loaded')"
    status=0
    python3 -m nerfstudio_accel.bench.cli --data "$GPU_DIR/lego" --device cuda --overwrite --out /tmp/bench \
        --budget-seconds "${BUDGET:-60}" --eval-points "${EVAL_POINTS:-3}" \
        --methods "${METHODS:-accel-ngp,accel-ngp:--pipeline.hard-mining=False,instant-ngp}" || status=$?
    cp /tmp/bench/results.json /tmp/bench/results.md /tmp/bench/psnr_vs_time.png "$OUT"/
    tar czf "$OUT/logs.tar.gz" -C /tmp/bench logs
    exit "$status"
    ;;
*)
    echo "usage: bash benchmarks/gpu_lego.sh prepare|run (see the comment at the top)" >&2
    exit 2
    ;;
esac
