#!/bin/bash
# One pair of the measure (lego 400x400, 150 s, seed 42): 068a42d then 2d5c685, git archive extracts in /tmp,
# numba kernels compiled first in a 10 s run at --downscale 4 each (not part of the results). Started from /tmp.
cd /tmp
for tree in t068 t2d5; do
  PYTHONPATH=/tmp/$tree /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
    --budget-seconds 10 --downscale 4 --device cpu --repeats 1 --eval-points 1 --out /tmp/ab6/warm_$tree > /tmp/ab6/warm_$tree.log 2>&1
done
for tree in t068 t2d5; do
  head -1 /proc/stat > /tmp/ab6/${tree}_s42.stat_before
  PYTHONPATH=/tmp/$tree /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
    --budget-seconds 150 --downscale 1 --device cpu --repeats 1 --seed 42 --eval-points 1 --out /tmp/ab6/${tree}_s42 \
    > /tmp/ab6/${tree}_s42.log 2>&1
  head -1 /proc/stat > /tmp/ab6/${tree}_s42.stat_after
  echo "$(date +%T) $tree 42 done" >> /tmp/ab6/progress.log
done
