#!/bin/bash
# Issue 38's quality targets at 10923c4's defaults: lego 400x400 600 s (seeds 42/43/44, all 25 test views at 300 s
# and 600 s), then lego 100x100 300 s (3 repeats, all 25 test views at 60, 120, 180, 240, 300 s).
OUT=/tmp/s72/targets
T=/tmp/s72/thead
stat() { head -1 /proc/stat > $OUT/$1; }
for S in 42 43 44; do
  stat s400_$S.stat_before
  (cd /tmp && PYTHONPATH=$T /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
    --budget-seconds 600 --downscale 1 --device cpu --repeats 1 --seed $S --eval-points 2 --out $OUT/s400_$S > $OUT/s400_$S.log 2>&1)
  stat s400_$S.stat_after
  echo "$(date +%T) 400x400 seed $S done"
done
stat s100.stat_before
(cd /tmp && PYTHONPATH=$T /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp \
  --downscale 4 --budget-seconds 300 --eval-points 5 --device cpu --repeats 3 --out $OUT/s100 > $OUT/s100.log 2>&1)
stat s100.stat_after
echo "$(date +%T) 100x100 done"
