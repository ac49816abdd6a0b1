#!/bin/bash
# usage: run_pair.sh SEED [METHODS] -- lego 400x400, 600 s, b1da6ba: growth at its default (2000) and off, in one bench call (METHODS gives the order)
SEED=$1
METHODS=${2:-accel-ngp,accel-ngp:--pipeline.model.table-growth-step=0}
OUT=/tmp/s67/lego_600s_seed$SEED
head -1 /proc/stat > $OUT.stat_before
PYTHONPATH=/tmp/tgrowth /work/main/.venv/bin/ns-accel-bench --data /work/shared/data/lego \
  --methods "$METHODS" --budget-seconds 600 --downscale 1 \
  --device cpu --repeats 1 --seed $SEED --eval-points 4 --out $OUT > $OUT.log 2>&1
echo "rc $?" >> $OUT.log
head -1 /proc/stat > $OUT.stat_after
