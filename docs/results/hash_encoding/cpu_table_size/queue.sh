#!/bin/bash
# Follow-up queue: seed 44 at 400x400 600 s (2^17 then 2^15), lego 100x100 300 s (2^15 and 2^17, seeds 42 and 43,
# interleaved), fruit 150 s pilot (2^15 and 2^17).
while pgrep -f "tb6/run.sh" > /dev/null; do sleep 10; done
cd /tmp
run() {  # name, out-dir, bench args...
  local name=$1 out=$2; shift 2
  head -1 /proc/stat > $out.stat_before
  PYTHONPATH=/work/main /work/main/.venv/bin/ns-accel-bench "$@" --out $out > $out.log 2>&1
  head -1 /proc/stat > $out.stat_after
  echo "$(date +%T) $name done" >> /tmp/tb6/progress.log
}
T17=accel-ngp:--pipeline.model.log2-hashmap-size=17
LEGO="--data data/lego --device cpu --repeats 1"
run "t17 44" /tmp/tb6/t17_s44 $LEGO --methods "$T17" --budget-seconds 600 --downscale 1 --seed 44 --eval-points 2
run "t15 44" /tmp/tb6/t15_s44 $LEGO --methods accel-ngp --budget-seconds 600 --downscale 1 --seed 44 --eval-points 2
mkdir -p /tmp/tb1
run "100px t15 42" /tmp/tb1/t15_s42 $LEGO --methods accel-ngp --budget-seconds 300 --downscale 4 --seed 42 --eval-points 5
run "100px t17 42" /tmp/tb1/t17_s42 $LEGO --methods "$T17" --budget-seconds 300 --downscale 4 --seed 42 --eval-points 5
run "100px t17 43" /tmp/tb1/t17_s43 $LEGO --methods "$T17" --budget-seconds 300 --downscale 4 --seed 43 --eval-points 5
run "100px t15 43" /tmp/tb1/t15_s43 $LEGO --methods accel-ngp --budget-seconds 300 --downscale 4 --seed 43 --eval-points 5
mkdir -p /tmp/tbf
FRUIT="--data data/fruit --dataparser nerfstudio-data --downscale 4 --device cpu --repeats 1 --budget-seconds 150 --eval-points 1 --seed 42"
run "fruit t15" /tmp/tbf/t15 $FRUIT --methods accel-ngp
run "fruit t17" /tmp/tbf/t17 $FRUIT --methods "$T17"
