#!/bin/bash
# The 0.6x measure at 10923c4: lego 400x400, 150 s, one bench call per arm, seeds 42/43/44, order rotated.
# Each tree runs its own ns-accel-bench (10923c4's starts its worker with OMP_WAIT_POLICY=PASSIVE).
OUT=/tmp/s72/measure
arm() {  # tree label seed
  head -1 /proc/stat > $OUT/$2_$3.stat_before
  (cd /tmp && PYTHONPATH=$1 /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
    --budget-seconds 150 --downscale 1 --device cpu --repeats 1 --seed $3 --eval-points 1 --out $OUT/$2_$3 > $OUT/$2_$3.log 2>&1)
  head -1 /proc/stat > $OUT/$2_$3.stat_after
  echo "$(date +%T) $2 seed $3 done"
}
arm /tmp/s72/t068 068a42d 42; arm /tmp/s72/thead 10923c4 42
arm /tmp/s72/thead 10923c4 43; arm /tmp/s72/t068 068a42d 43
arm /tmp/s72/t068 068a42d 44; arm /tmp/s72/thead 10923c4 44
