#!/bin/bash
# lego 200x200 (4 M training pixels), 300 s, seed 44: 2^17 first, then the default (2^15 under the 8 M threshold of then).
# Tree 4879482 checked out in the worktree /tmp/wt_head, started from /tmp.
cd /tmp
for arm in t17 default; do
  if [ $arm = default ]; then m='accel-ngp'; else m='accel-ngp:--pipeline.model.log2-hashmap-size=17'; fi
  head -1 /proc/stat > /tmp/b200/$arm.stat_before
  PYTHONPATH=/tmp/wt_head /work/main/.venv/bin/ns-accel-bench --data data/lego --downscale 2 --budget-seconds 300 --eval-points 5 --device cpu --repeats 1 --seed 44 --methods "$m" --out /tmp/b200/$arm > /tmp/b200/$arm.log 2>&1
  head -1 /proc/stat > /tmp/b200/$arm.stat_after
done
echo done > /tmp/b200/finished
