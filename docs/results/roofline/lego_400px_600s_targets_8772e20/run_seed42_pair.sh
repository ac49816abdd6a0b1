#!/bin/bash
# Lego 400x400, 600 s per arm, seeds 42, 43, 44: main (8772e20) at its defaults (2^17 rows) and with a 2^16-row
# table, interleaved in one bench call per seed; PSNR on all 25 test views at 300 s and 600 s.
cd /tmp
B=/work/main/.venv/bin/ns-accel-bench
for S in 42 43 44; do
  head -1 /proc/stat > /tmp/p66b/stat_before_$S
  PYTHONPATH=/tmp/t8772 $B --data /work/shared/data/lego --methods "accel-ngp,accel-ngp:--pipeline.model.log2-hashmap-size=16" \
    --budget-seconds 600 --downscale 1 --device cpu --repeats 1 --seed $S --eval-points 2 \
    --out /tmp/p66b/head_t16_s$S > /tmp/p66b/head_t16_s$S.log 2>&1
  head -1 /proc/stat > /tmp/p66b/stat_after_$S
  echo "seed $S done $(date +%T)" >> /tmp/p66b/progress
done
# The fruit capture at full resolution (35.6 M training pixels, proposal sampler), 300 s, seed 42, both arms.
head -1 /proc/stat > /tmp/p66b/stat_before_fruit
PYTHONPATH=/tmp/t8772 $B --data /work/shared/data/fruit --dataparser nerfstudio-data --downscale 1 --device cpu \
  --repeats 1 --budget-seconds 300 --eval-points 2 --seed 42 \
  --methods "accel-ngp,accel-ngp:--pipeline.model.log2-hashmap-size=16" --out /tmp/p66b/fruit_t16 > /tmp/p66b/fruit_t16.log 2>&1
head -1 /proc/stat > /tmp/p66b/stat_after_fruit
echo "fruit done $(date +%T)" >> /tmp/p66b/progress
