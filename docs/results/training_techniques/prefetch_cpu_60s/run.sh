#!/bin/bash
# Lego 100x100, 60 s: 36d67c8's CPU default (prefetch depth 0) against depth 2, each seed's two arms in one bench call,
# the arms' order swapped on seed 43. Started from /tmp/scr64.
cd /tmp/scr64
D0='accel-ngp'
D2='accel-ngp:--pipeline.datamanager.prefetch-batches 2'
B="env PYTHONPATH=/tmp/tnew /work/main/.venv/bin/ns-accel-bench --device cpu --repeats 1"
for seed in 42 43 44; do
  if [ $seed = 43 ]; then M="$D2,$D0"; else M="$D0,$D2"; fi
  head -1 /proc/stat > stat_before_s$seed.txt
  $B --data data/lego --downscale 4 --budget-seconds 60 --eval-points 2 --seed $seed --methods "$M" --out lego_100px_60s_s$seed > log_s$seed.txt 2>&1
  head -1 /proc/stat > stat_after_s$seed.txt
  echo "$(date +%T) $seed done" >> progress.log
done
