#!/bin/bash
# After the measure: the session's starting tree (9c846bc) on the same host, seeds 42/43/44, to separate this
# session's kernel change from the host (an Intel Xeon this session, an AMD EPYC in the earlier ones).
OUT=/tmp/s71/measure
arm() {  # tree label seed
  head -1 /proc/stat > $OUT/$2_$3.stat_before
  (cd /tmp && PYTHONPATH=$1 /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
    --budget-seconds 150 --downscale 1 --device cpu --repeats 1 --seed $3 --eval-points 1 --out $OUT/$2_$3 > $OUT/$2_$3.log 2>&1)
  head -1 /proc/stat > $OUT/$2_$3.stat_after
  echo "$(date +%T) $2 seed $3 done"
}
arm /tmp/s71/thead 9c846bc 42; arm /tmp/s71/thead 9c846bc 43; arm /tmp/s71/thead 9c846bc 44
