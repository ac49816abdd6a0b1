#!/bin/bash
# Lego 400x400, 150 s per arm, seeds 42, 43, 44: per seed 068a42d and main (7a96f74) at their defaults, each in its
# own bench call, the order alternated per seed (068a42d first for 42 and 44, main first for 43).
cd /tmp
B=/work/main/.venv/bin/ns-accel-bench
O=/tmp/s68/m06
mkdir -p $O
arm() {  # name tree seed
  PYTHONPATH=$2 $B --data /work/shared/data/lego --methods accel-ngp --budget-seconds 150 --downscale 1 \
    --device cpu --repeats 1 --seed $3 --eval-points 1 --out $O/$1_s$3 > $O/$1_s$3.log 2>&1
}
for S in 42 43 44; do
  head -1 /proc/stat > $O/stat_before_$S
  if [ $S = 43 ]; then arm main /tmp/thead68 $S; arm t068 /tmp/t068c $S; else arm t068 /tmp/t068c $S; arm main /tmp/thead68 $S; fi
  head -1 /proc/stat > $O/stat_after_$S
  echo "seed $S done $(date +%T)" >> $O/progress
done
