#!/bin/bash
# lego 100x100, 60 s, default (2^14 samples/step) against --pipeline.target-num-samples=8192, arms alternated per seed.
# Tree 4879482 checked out in the worktree /tmp/wt_head, started from /tmp.
cd /tmp
for seed in 42 43 44; do
  for arm in default t8192; do
    if [ $arm = default ]; then m='accel-ngp'; else m='accel-ngp:--pipeline.target-num-samples=8192'; fi
    head -1 /proc/stat > /tmp/b60/$arm-$seed.stat_before
    PYTHONPATH=/tmp/wt_head /work/main/.venv/bin/ns-accel-bench --data data/lego --downscale 4 --budget-seconds 60 --eval-points 1 --device cpu --repeats 1 --seed $seed --methods "$m" --out /tmp/b60/$arm-$seed > /tmp/b60/$arm-$seed.log 2>&1
    head -1 /proc/stat > /tmp/b60/$arm-$seed.stat_after
  done
done
echo done > /tmp/b60/finished
