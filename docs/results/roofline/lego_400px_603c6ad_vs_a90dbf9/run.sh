#!/bin/bash
# Interleaved 400x400 rooflines: 603c6ad (before) vs a90dbf9 (empty-cube pyramid, features summed in registers)
# Trees: git archive extracts of 603c6ad (/tmp/t603) and a90dbf9 (/tmp/ta90).
for round in 1 2; do
  for tree in t603 ta90; do
    cd /tmp/$tree/benchmarks
    name=lego_400px_${tree}_r$round
    head -1 /proc/stat > /tmp/rf4/$name.stat
    echo "$(date +%T) start $name" >> /tmp/rf4/ab_progress.txt
    PYTHONPATH=/tmp/$tree /work/main/.venv/bin/python roofline.py --data /work/shared/data/lego --downscale 1 --warmup 2000 --json /tmp/rf4/$name.json --markdown /tmp/rf4/$name.md > /tmp/rf4/$name.log 2>&1
    head -1 /proc/stat >> /tmp/rf4/$name.stat
  done
done
echo "$(date +%T) done" >> /tmp/rf4/ab_progress.txt
