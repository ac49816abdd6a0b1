#!/bin/bash
# interleaved: uniform vs error-guided, lego 100x100, 60 s, one seed per bench call
B=/work/main/.venv/bin/ns-accel-bench
for s in 42 43; do
  for m in "accel-ngp" "accel-ngp:--pipeline.datamanager.error-guided-rays.enabled=True"; do
    tag=$([ "$m" = accel-ngp ] && echo uniform || echo guided)
    head -1 /proc/stat > /tmp/egb/il2/${tag}_s$s.stat
    $B --data data/lego --methods "$m" --budget-seconds 60 --downscale 4 --device cpu --repeats 1 --seed $s --eval-points 1 --out /tmp/egb/il2/${tag}_s$s > /tmp/egb/il2/${tag}_s$s.log 2>&1
    head -1 /proc/stat >> /tmp/egb/il2/${tag}_s$s.stat
  done
done
