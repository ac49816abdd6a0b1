#!/bin/bash
# 1. Warm-start pilot (seed 42), tree b286f0f: a 2000-step lego 100x100 source (2^15 rows), timed, then 400x400 for
#    600 s minus the source's time with --pipeline.model.init-from (its table grown to 2^17 rows).
# 2. Lego 400x400, 600 s, main at its defaults, seeds 43 and 44 (tree 8772e20; seed 42's pair is in /tmp/p66b).
cd /tmp
V=/work/main/.venv/bin
head -1 /proc/stat > /tmp/p66c/stat_before_warm
T0=$(date +%s.%N)
PYTHONPATH=/tmp/tgrow $V/ns-train accel-ngp --machine.device-type cpu --vis tensorboard --max-num-iterations 2000 \
  --steps-per-eval-image 100000 --steps-per-eval-batch 100000 --steps-per-eval-all-images 1000000 \
  --output-dir /tmp/p66c/sources --experiment-name lego_100px --timestamp run \
  --pipeline.datamanager.camera-res-scale-factor 0.25 blender-data --data /work/shared/data/lego > /tmp/p66c/source.log 2>&1
T1=$(date +%s.%N)
SRC=$(python3 -c "print(round($T1 - $T0, 1))")
BUDGET=$(python3 -c "print(round(600 - $T1 + $T0))")
echo "source ${SRC} s, warm budget ${BUDGET} s" >> /tmp/p66c/progress
PYTHONPATH=/tmp/tgrow $V/ns-accel-bench --data /work/shared/data/lego --budget-seconds $BUDGET --downscale 1 --device cpu \
  --repeats 1 --seed 42 --eval-points 1 \
  --methods "accel-ngp:--pipeline.model.init-from=/tmp/p66c/sources/lego_100px/accel-ngp/run" \
  --out /tmp/p66c/warm_s42 > /tmp/p66c/warm_s42.log 2>&1
head -1 /proc/stat > /tmp/p66c/stat_after_warm
echo "warm done $(date +%T)" >> /tmp/p66c/progress
for S in 43 44; do
  head -1 /proc/stat > /tmp/p66c/stat_before_$S
  PYTHONPATH=/tmp/t8772 $V/ns-accel-bench --data /work/shared/data/lego --methods accel-ngp --budget-seconds 600 --downscale 1 \
    --device cpu --repeats 1 --seed $S --eval-points 2 --out /tmp/p66c/head_s$S > /tmp/p66c/head_s$S.log 2>&1
  head -1 /proc/stat > /tmp/p66c/stat_after_$S
  echo "seed $S done $(date +%T)" >> /tmp/p66c/progress
done
