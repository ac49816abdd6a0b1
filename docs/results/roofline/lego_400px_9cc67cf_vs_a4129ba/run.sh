#!/bin/bash
# Interleaved 400x400 rooflines: 9cc67cf (fused culling pass, marcher apart) vs a4129ba (marching inside the pass, denormals flushed)
for round in 1 2; do
  for tree in t9cc ta41; do
    cd /tmp/$tree/benchmarks
    name=lego_400px_${tree}_r$round
    head -1 /proc/stat > /tmp/rf2/$name.stat
    echo "$(date +%T) start $name" >> /tmp/rf2/ab_progress.txt
    PYTHONPATH=/tmp/$tree /work/main/.venv/bin/python roofline.py --data /work/shared/data/lego --downscale 1 --warmup 2000 --json /tmp/rf2/$name.json --markdown /tmp/rf2/$name.md > /tmp/rf2/$name.log 2>&1
    head -1 /proc/stat >> /tmp/rf2/$name.stat
  done
done
echo "$(date +%T) done" >> /tmp/rf2/ab_progress.txt
