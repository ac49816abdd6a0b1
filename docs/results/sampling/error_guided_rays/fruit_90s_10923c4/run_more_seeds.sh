#!/bin/bash
# Three more fruit seeds (45, 46, 47) of the error-guided pair, same commands as eg_run.sh's second loop.
OUT=/tmp/s72/eg
T=/tmp/s72/thead
B=/work/main/.venv/bin/ns-accel-bench
G="accel-ngp:--pipeline.datamanager.error-guided-rays.enabled=True"
for s in 45 46 47; do
  for m in accel-ngp "$G"; do
    tag=$([ "$m" = accel-ngp ] && echo uniform || echo guided)
    d=$OUT/fruit_${tag}_s$s
    head -1 /proc/stat > $d.stat
    (cd /tmp && PYTHONPATH=$T $B --data data/fruit --dataparser nerfstudio-data --methods "$m" --budget-seconds 90 \
      --downscale 4 --device cpu --repeats 1 --seed $s --eval-points 1 --out $d > $d.log 2>&1)
    head -1 /proc/stat >> $d.stat
    echo "$(date +%T) fruit $tag seed $s done"
  done
done
