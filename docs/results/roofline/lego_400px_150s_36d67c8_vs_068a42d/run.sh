#!/bin/bash
# A 150 s measure on lego 400x400 for 36d67c8 (prefetch depth 0 on the CPU) against 068a42d, and 36d67c8 with
# the old depth 2, three seeds, the three arms' order rotated per seed; git archive extracts in /tmp; numba kernels of
# the new tree compiled first in a 10 s run at --downscale 4 (not part of the results). Started from /tmp.
cd /tmp
B=/work/main/.venv/bin/ns-accel-bench
PYTHONPATH=/tmp/tnew $B --data data/lego --methods accel-ngp --budget-seconds 10 --downscale 4 --device cpu \
  --repeats 1 --eval-points 1 --out /tmp/ab64/warm_tnew > /tmp/ab64/warm_tnew.log 2>&1
arm() {  # tree name, seed, extra methods suffix
  local tree=$1 seed=$2 name=$3 methods=$4
  head -1 /proc/stat > /tmp/ab64/${name}_s$seed.stat_before
  PYTHONPATH=/tmp/$tree $B --data data/lego --methods "$methods" --budget-seconds 150 --downscale 1 \
    --device cpu --repeats 1 --seed $seed --eval-points 1 --out /tmp/ab64/${name}_s$seed > /tmp/ab64/${name}_s$seed.log 2>&1
  head -1 /proc/stat > /tmp/ab64/${name}_s$seed.stat_after
  echo "$(date +%T) $name $seed done" >> /tmp/ab64/progress.log
}
A="t068 068a42d accel-ngp"
P2="tnew depth2 accel-ngp:--pipeline.datamanager.prefetch-batches 2"
P0="tnew depth0 accel-ngp"
run() { set -- $1; local tree=$1 name=$2; shift 2; arm $tree $seed $name "$*"; }
seed=42; run "$A"; run "$P2"; run "$P0"
seed=43; run "$P2"; run "$P0"; run "$A"
seed=44; run "$P0"; run "$A"; run "$P2"
echo "$(date +%T) all done" >> /tmp/ab64/progress.log
