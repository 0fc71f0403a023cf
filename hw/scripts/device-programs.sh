#!/usr/bin/env bash
# Runs every program of a trace folder's programs/ N times on the device (no Rust toolchain needed there): run from
# the repository root with .hwcarry/cuorder-hw (a stripped release build). Writes under $OUT: log.txt (machine, every
# run's exit and wall time) and runs.tar.gz (the observations NAME-I.ron, for the folder's MANIFEST.ron).
# usage: hw/scripts/device-programs.sh traces/hw/FOLDER [N]
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
dir=$1; n=${2:-3}
OUT=${OUT:-/tmp/cuorder-programs-out}
B=$PWD/.hwcarry/cuorder-hw
chmod +x "$B"
RUNS=/tmp/cuorder-programs-runs
mkdir -p "$OUT" "$RUNS"
LOG=$OUT/log.txt
{
  echo "== machine"
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv
  timeout -s KILL 60 "$B" env
} >>"$LOG" 2>&1
for p in "$dir"/programs/*.ron; do
  name=$(basename "$p" .ron)
  for i in $(seq 1 "$n"); do
    s=$(date +%s%N)
    timeout -s KILL 120 "$B" run "$p" --out "$RUNS/$name-$i.ron" --timeout-s 20 >>"$LOG" 2>&1
    echo "== $name-$i: exit $?, wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >>"$LOG"
  done
done
tar czf "$OUT/runs.tar.gz" -C "$RUNS" .
grep -E "^== " "$LOG" | tail -40
