#!/bin/bash
# Lego 400x400, 300 s, three seeds, interleaved: accel-ngp's defaults (16 levels up to 2048) and 8 levels up to 512.
# Tree: /work/main at ecbb156 (numba caches warm), started from /tmp.
cd /tmp
for seed in 42 43 44; do
  for arm in levels16 levels8; do
    if [ $arm = levels16 ]; then methods=accel-ngp; else methods='accel-ngp:--pipeline.model.num-levels=8 --pipeline.model.max-res=512'; fi
    head -1 /proc/stat > /tmp/lv3/${arm}_s$seed.stat_before
    PYTHONPATH=/work/main /work/main/.venv/bin/ns-accel-bench --data data/lego --methods "$methods" \
      --budget-seconds 300 --downscale 1 --device cpu --repeats 1 --seed $seed --eval-points 2 --out /tmp/lv3/${arm}_s$seed \
      > /tmp/lv3/${arm}_s$seed.log 2>&1
    head -1 /proc/stat > /tmp/lv3/${arm}_s$seed.stat_after
    echo "$(date +%T) $arm $seed done"
  done
done
