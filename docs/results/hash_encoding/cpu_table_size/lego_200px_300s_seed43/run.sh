#!/bin/bash
# Lego 200x200 (4 M training pixels, under the rule's 8 M: its default is 2^15), 300 s, seed 43: 2^17 then the
# defaults (the reverse of seed 42's order). Tree /work/main at 5416013, started from /tmp.
cd /tmp
for arm in t17 t15; do
  if [ $arm = t15 ]; then methods=accel-ngp; else methods=accel-ngp:--pipeline.model.log2-hashmap-size=17; fi
  head -1 /proc/stat > /tmp/tb8/$arm.stat_before
  PYTHONPATH=/work/main /work/main/.venv/bin/ns-accel-bench --data data/lego --methods "$methods" \
    --budget-seconds 300 --downscale 2 --device cpu --repeats 1 --seed 43 --eval-points 5 --out /tmp/tb8/$arm \
    > /tmp/tb8/$arm.log 2>&1
  head -1 /proc/stat > /tmp/tb8/$arm.stat_after
  echo "$(date +%T) 200px $arm 43 done" >> /tmp/tb8/progress.log
done
