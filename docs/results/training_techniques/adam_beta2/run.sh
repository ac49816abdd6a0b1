#!/bin/bash
# Adam's second-moment decay: the defaults of then (betas 0.9, 0.999) against --optimizers.fields.optimizer.betas
# 0.9 0.99, each seed's arms in turn in one bench call. Tree da4a666 plus the `betas` field of
# FusedAdamOptimizerConfig (a worktree, /tmp/wt_b), started from /tmp; CPU time stolen per call in the README.
cd /tmp
M='accel-ngp,accel-ngp:--optimizers.fields.optimizer.betas 0.9 0.99'
B="env PYTHONPATH=/tmp/wt_b /work/main/.venv/bin/ns-accel-bench --device cpu --repeats 1"
LEGO=data/lego
# lego 100x100, 60 s: seed 42 (with a third arm, lr 2e-2), then seeds 43 and 44
$B --data $LEGO --downscale 4 --budget-seconds 60 --eval-points 2 --seed 42 --methods "$M,accel-ngp:--optimizers.fields.optimizer.lr 2e-2" --out lego_100px_60s_s42
for seed in 43 44; do
  $B --data $LEGO --downscale 4 --budget-seconds 60 --eval-points 2 --seed $seed --methods "$M" --out lego_100px_60s_s$seed
done
# lego 100x100 for 300 s (seed 42), lego 400x400 for 300 s (seed 42)
$B --data $LEGO --downscale 4 --budget-seconds 300 --eval-points 5 --seed 42 --methods "$M" --out lego_100px_300s_s42
$B --data $LEGO --downscale 1 --budget-seconds 300 --eval-points 2 --seed 42 --methods "$M" --out lego_400px_300s_s42
# lego 100x100 for 300 s, seeds 43 and 44; the fruit capture at a quarter of its size for 150 s, seed 42
for seed in 43 44; do
  $B --data $LEGO --downscale 4 --budget-seconds 300 --eval-points 5 --seed $seed --methods "$M" --out lego_100px_300s_s$seed
done
$B --data data/fruit --dataparser nerfstudio-data --downscale 4 --budget-seconds 150 --eval-points 1 --seed 42 --methods "$M" --out fruit_150s_s42
