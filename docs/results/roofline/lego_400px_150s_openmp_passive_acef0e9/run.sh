#!/bin/bash
# Lego 400x400, 150 s per arm, seeds 42, 43, 44, each arm its own bench call, the order rotated per seed:
#   t068  = 068a42d as shipped (OMP_WAIT_POLICY unset; its bench sets nothing)
#   t068p = 068a42d with OMP_WAIT_POLICY=PASSIVE exported
#   main  = acef0e9 as shipped (its bench starts the worker with OMP_WAIT_POLICY=PASSIVE)
cd /tmp
B=/work/main/.venv/bin/ns-accel-bench
O=/tmp/s68/m07
mkdir -p $O
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
arm() {  # name seed
  case $1 in
    t068) T=/tmp/t068c; E=X=1 ;;
    t068p) T=/tmp/t068c; E=OMP_WAIT_POLICY=PASSIVE ;;
    main) T=/tmp/tacef; E=X=1 ;;
  esac
  env $E PYTHONPATH=$T $B --data /work/shared/data/lego --methods accel-ngp --budget-seconds 150 --downscale 1 \
    --device cpu --repeats 1 --seed $2 --eval-points 1 --out $O/$1_s$2 > $O/$1_s$2.log 2>&1
}
for S in 42 43 44; do
  head -1 /proc/stat > $O/stat_before_$S
  case $S in
    42) arm t068 $S; arm main $S; arm t068p $S ;;
    43) arm main $S; arm t068p $S; arm t068 $S ;;
    44) arm t068p $S; arm t068 $S; arm main $S ;;
  esac
  head -1 /proc/stat > $O/stat_after_$S
  echo "seed $S done $(date +%T)" >> $O/progress
done
