#!/bin/bash
# The training-pixel rule for the CPU's hash-table size (2^17 rows from 8 M training pixels, else 2^15), checked:
# fruit at full resolution (35.6 M training pixels, a capture: the rule's unmeasured case), 300 s, the rule's
# 2^17 against 2^15; then lego 400x400 600 s at the new defaults (2^17 by the rule), seed 45.
# Tree: a worktree of the rule's change (/tmp/wt, numba caches warmed by a 20 s run each), started from /tmp.
cd /tmp
out=/tmp/tb7
run() {  # name, out-dir, bench args...
  local name=$1 dir=$2; shift 2
  head -1 /proc/stat > $dir.stat_before
  PYTHONPATH=/tmp/wt /work/main/.venv/bin/ns-accel-bench "$@" --out $dir > $dir.log 2>&1
  head -1 /proc/stat > $dir.stat_after
  echo "$(date +%T) $name done" >> $out/progress.log
}
FRUIT="--data data/fruit --dataparser nerfstudio-data --downscale 1 --device cpu --repeats 1 --budget-seconds 300 --eval-points 2 --seed 42"
run "fruit t15" $out/fruit_t15 $FRUIT --methods accel-ngp:--pipeline.model.log2-hashmap-size=15
run "fruit default (t17)" $out/fruit_default $FRUIT --methods accel-ngp
run "lego 400px default (t17) 45" $out/lego_default_s45 --data data/lego --device cpu --repeats 1 \
  --methods accel-ngp --budget-seconds 600 --downscale 1 --seed 45 --eval-points 2
# Added after the three above: seed 45's 2^15 arm, for a pair at the same host state (that run made 10,053 steps).
run "lego 400px t15 45" $out/lego_t15_s45 --data data/lego --device cpu --repeats 1 \
  --methods accel-ngp:--pipeline.model.log2-hashmap-size=15 --budget-seconds 600 --downscale 1 --seed 45 --eval-points 2
