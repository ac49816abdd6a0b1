#!/bin/bash
# Screening for the 100x100 60 s target at d0ff27b (run 2026-11-30 03:43 to 04:00): the grid's warm-up halved, and Adam's beta2 at 0.95, against the
# defaults, each seed's arms in turn in one bench call. Started from /tmp/scr63.
cd /tmp/scr63
M='accel-ngp,accel-ngp:--pipeline.model.occupancy.warmup-steps 128,accel-ngp:--optimizers.fields.optimizer.betas 0.9 0.95'
B="env PYTHONPATH=/work/main /work/main/.venv/bin/ns-accel-bench --device cpu --repeats 1"
for seed in 42 43 44; do
  head -1 /proc/stat > stat_before_s$seed.txt
  $B --data data/lego --downscale 4 --budget-seconds 60 --eval-points 2 --seed $seed --methods "$M" --out lego_100px_60s_s$seed
  head -1 /proc/stat > stat_after_s$seed.txt
done
