#!/bin/bash
# Lego 400x400, 150 s per arm, seeds 43, 44, 42: per seed 068a42d at its defaults, then main (8772e20) at its
# defaults and with a 2^16-row table, interleaved in one bench call.
cd /tmp
B=/work/main/.venv/bin/ns-accel-bench
for S in 43 44 42; do
  head -1 /proc/stat > /tmp/p66/stat_before_$S
  PYTHONPATH=/tmp/t068 $B --data /work/shared/data/lego --methods accel-ngp --budget-seconds 150 --downscale 1 \
    --device cpu --repeats 1 --seed $S --eval-points 1 --out /tmp/p66/t068_s$S > /tmp/p66/t068_s$S.log 2>&1
  PYTHONPATH=/tmp/t8772 $B --data /work/shared/data/lego --methods "accel-ngp,accel-ngp:--pipeline.model.log2-hashmap-size=16" \
    --budget-seconds 150 --downscale 1 --device cpu --repeats 1 --seed $S --eval-points 1 \
    --out /tmp/p66/head_t16_s$S > /tmp/p66/head_t16_s$S.log 2>&1
  head -1 /proc/stat > /tmp/p66/stat_after_$S
  echo "seed $S done $(date +%T)" >> /tmp/p66/progress
done
