#!/bin/bash
export XPU_TIMER_SHM_DIR=$(mktemp -d /dev/shm/tdiag.XXXX) PYTHONWARNINGS=ignore
V=off,full,no_below,finish_now,hold,passthru,poll50
for W in 1; do
  VARIANTS=$V torchrun --standalone --nproc-per-node=$W .scratch/tdiag.py 2>&1 | grep -v Warning
  echo "-- flight recorder off"
  TORCH_NCCL_TRACE_BUFFER_SIZE=0 VARIANTS=$V torchrun --standalone --nproc-per-node=$W .scratch/tdiag.py 2>&1 | grep -v Warning
  echo "-- no sync"
  SYNC=0 VARIANTS=$V torchrun --standalone --nproc-per-node=$W .scratch/tdiag.py 2>&1 | grep -v Warning
done
rm -rf $XPU_TIMER_SHM_DIR
