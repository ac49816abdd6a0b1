#!/bin/bash
# Pilot, lego 400x400, 150 s, seed 42: 068a42d at its defaults, then HEAD at its defaults and with a 2^16-row table.
cd /tmp
B=/work/main/.venv/bin/ns-accel-bench
head -1 /proc/stat > /tmp/p65/stat_before
PYTHONPATH=/tmp/t068 $B --data /work/shared/data/lego --methods accel-ngp --budget-seconds 150 --downscale 1 --device cpu \
  --repeats 1 --seed 42 --eval-points 1 --out /tmp/p65/t068_s42 > /tmp/p65/t068_s42.log 2>&1
PYTHONPATH=/tmp/thead $B --data /work/shared/data/lego --methods "accel-ngp,accel-ngp:--pipeline.model.log2-hashmap-size=16" \
  --budget-seconds 150 --downscale 1 --device cpu --repeats 1 --seed 42 --eval-points 1 --out /tmp/p65/head_t16_s42 > /tmp/p65/head_t16_s42.log 2>&1
head -1 /proc/stat > /tmp/p65/stat_after
echo done >> /tmp/p65/progress
