#!/bin/bash
# Error-guided rays against uniform draws at equal time, interleaved (uniform then guided per seed), tree 10923c4.
# lego 100x100 60 s seeds 43 and 44; fruit (nerfstudio-data, downscale 4) 90 s seeds 42, 43, 44.
OUT=/tmp/s72/eg
T=/tmp/s72/thead
B=/work/main/.venv/bin/ns-accel-bench
mkdir -p $OUT
one() {  # scene tag seed budget method extra...
  local scene=$1 tag=$2 s=$3 budget=$4 m=$5; shift 5
  local d=$OUT/${scene}_${tag}_s$s
  head -1 /proc/stat > $d.stat
  (cd /tmp && PYTHONPATH=$T $B --data data/$scene "$@" --methods "$m" --budget-seconds $budget --downscale 4 \
    --device cpu --repeats 1 --seed $s --eval-points 1 --out $d > $d.log 2>&1)
  head -1 /proc/stat >> $d.stat
  echo "$(date +%T) $scene $tag seed $s done"
}
G="accel-ngp:--pipeline.datamanager.error-guided-rays.enabled=True"
for s in 43 44; do
  one lego uniform $s 60 accel-ngp
  one lego guided $s 60 "$G"
done
for s in 42 43 44; do
  one fruit uniform $s 90 accel-ngp --dataparser nerfstudio-data
  one fruit guided $s 90 "$G" --dataparser nerfstudio-data
done
