#!/bin/bash
# Lego 200x200 (4 M training pixels), 300 s, seed 42: defaults (2^15) then 2^17. Tree /work/main at 0d663d5.
cd /tmp
for arm in t15 t17; do
  if [ $arm = t15 ]; then methods=accel-ngp; else methods=accel-ngp:--pipeline.model.log2-hashmap-size=17; fi
  head -1 /proc/stat > /tmp/tb2/$arm.stat_before
  PYTHONPATH=/work/main /work/main/.venv/bin/ns-accel-bench --data data/lego --methods "$methods" \
    --budget-seconds 300 --downscale 2 --device cpu --repeats 1 --seed 42 --eval-points 5 --out /tmp/tb2/$arm \
    > /tmp/tb2/$arm.log 2>&1
  head -1 /proc/stat > /tmp/tb2/$arm.stat_after
  echo "$(date +%T) 200px $arm 42 done" >> /tmp/tb2/progress.log
done
