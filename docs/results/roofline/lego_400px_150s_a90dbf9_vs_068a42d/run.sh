#!/bin/bash
# Lego 400x400, 150 s, three seeds, interleaved: 068a42d (the base) and a90dbf9 (after).
# Trees: git archive extracts (t068 = 068a42d, ta90 = a90dbf9), started from /tmp; both compiled their numba kernels
# first in a 10 s run at --downscale 4 (not part of the results).
cd /tmp
for seed in 42 43 44; do
  for tree in t068 ta90; do
    head -1 /proc/stat > /tmp/ab4/${tree}_s$seed.stat_before
    PYTHONPATH=/tmp/$tree /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
      --budget-seconds 150 --downscale 1 --device cpu --repeats 1 --seed $seed --eval-points 1 --out /tmp/ab4/${tree}_s$seed \
      > /tmp/ab4/${tree}_s$seed.log 2>&1
    head -1 /proc/stat > /tmp/ab4/${tree}_s$seed.stat_after
    echo "$(date +%T) $tree $seed done"
  done
done
