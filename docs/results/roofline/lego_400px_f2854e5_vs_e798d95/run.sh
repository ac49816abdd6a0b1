#!/bin/bash
# Interleaved 400x400 rooflines: f2854e5 (before) vs e798d95 (the torch phases' kernels)
# Trees: git archive extracts of f2854e5 (/tmp/tf28) and e798d95 (/tmp/tnew).
for round in 1 2; do
  for tree in tf28 tnew; do
    cd /tmp/$tree/benchmarks
    name=lego_400px_${tree}_r$round
    head -1 /proc/stat > /tmp/rf3/$name.stat
    echo "$(date +%T) start $name" >> /tmp/rf3/ab_progress.txt
    PYTHONPATH=/tmp/$tree /work/main/.venv/bin/python roofline.py --data /work/shared/data/lego --downscale 1 --warmup 2000 --json /tmp/rf3/$name.json --markdown /tmp/rf3/$name.md > /tmp/rf3/$name.log 2>&1
    head -1 /proc/stat >> /tmp/rf3/$name.stat
  done
done
echo "$(date +%T) done" >> /tmp/rf3/ab_progress.txt
