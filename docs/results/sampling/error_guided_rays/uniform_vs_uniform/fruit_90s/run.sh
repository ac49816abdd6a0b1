#!/bin/bash
B=/work/main/.venv/bin/ns-accel-bench
for s in 42 43 44; do
  for m in "accel-ngp" "accel-ngp:--pipeline.datamanager.error-guided-rays.enabled=True"; do
    tag=$([ "$m" = accel-ngp ] && echo uniform || echo guided)
    head -1 /proc/stat > /tmp/egb/fr/${tag}_s$s.stat
    $B --data /work/shared/data/fruit --dataparser nerfstudio-data --methods "$m" --budget-seconds 90 --downscale 4 --device cpu --repeats 1 --seed $s --eval-points 1 --out /tmp/egb/fr/${tag}_s$s > /tmp/egb/fr/${tag}_s$s.log 2>&1
    head -1 /proc/stat >> /tmp/egb/fr/${tag}_s$s.stat
  done
done
