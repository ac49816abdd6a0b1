#!/bin/bash
# Lego 400x400, 600 s (PSNR at 300 and 600 s), hash-table size 2^15 (the CPU default), 2^16 and 2^17 rows per level.
# Interleaved: each seed runs its three arms in turn, the order rotated from seed to seed.
# Tree: /work/main at 90c1718 (numba caches warm), started from /tmp. Usage: run.sh SEED... (e.g. run.sh 42 43)
cd /tmp
i=0
for seed in "$@"; do
  arms=(t15 t16 t17)
  order=("${arms[@]:$i}" "${arms[@]:0:$i}")
  i=$(( (i + 1) % 3 ))
  for arm in "${order[@]}"; do
    if [ $arm = t15 ]; then methods=accel-ngp; else methods="accel-ngp:--pipeline.model.log2-hashmap-size=${arm#t}"; fi
    head -1 /proc/stat > /tmp/tb6/${arm}_s$seed.stat_before
    PYTHONPATH=/work/main /work/main/.venv/bin/ns-accel-bench --data data/lego --methods "$methods" \
      --budget-seconds 600 --downscale 1 --device cpu --repeats 1 --seed $seed --eval-points 2 --out /tmp/tb6/${arm}_s$seed \
      > /tmp/tb6/${arm}_s$seed.log 2>&1
    head -1 /proc/stat > /tmp/tb6/${arm}_s$seed.stat_after
    echo "$(date +%T) $arm $seed done" >> /tmp/tb6/progress.log
  done
done
