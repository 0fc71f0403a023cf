#!/usr/bin/env bash
# Hardware runs of issue 10's operations on a single-GPU host (no Rust toolchain needed there): run from the
# repository root with .hwcarry/cuorder-hw (a stripped release build). Runs the S7/S8 smoke program `host_calls`
# (Malloc, MallocHost, LoadModule, HostFunc, cudaFree) 3 times, and twice more with CUDA_LAUNCH_BLOCKING=1, and each
# program of traces/hw/issue10-2026-12-02/programs 3 times (NCCL >= 2.28 collectives and CommSplit on one rank; V1
# value assertions). Writes under $OUT: log.txt (machine, every run's exit and wall time) and runs.tar.gz (the
# observations, NAME-N.ron).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cuorder-issue10-out}
B=$PWD/.hwcarry/cuorder-hw
chmod +x "$B"
RUNS=/tmp/cuorder-issue10-runs
WORK=/tmp/cuorder-issue10-work
mkdir -p "$OUT" "$RUNS" "$WORK"
LOG=$OUT/log.txt
{
  echo "== machine"
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv
  timeout -s KILL 60 "$B" env
} >>"$LOG" 2>&1
timeout -s KILL 60 "$B" smoke-programs --dir "$WORK/smoke" >>"$LOG" 2>&1
run() { # NAME PROGRAM N [ENV...]
  local name=$1 prog=$2 i=$3; shift 3
  local s; s=$(date +%s%N)
  env "$@" timeout -s KILL 120 "$B" run "$prog" --out "$RUNS/$name-$i.ron" --timeout-s 20 >>"$LOG" 2>&1
  echo "== $name-$i: exit $?, wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >>"$LOG"
}
for i in 1 2 3; do run host-calls "$WORK/smoke/host_calls.ron" $i; done
for i in 1 2; do run host-calls-launch-blocking "$WORK/smoke/host_calls.ron" $i CUDA_LAUNCH_BLOCKING=1; done
cp "$WORK/smoke/host_calls.ron" "$RUNS/host_calls.program.ron"
for p in traces/hw/issue10-2026-12-02/programs/*.ron; do
  n=$(basename "$p" .ron)
  for i in 1 2 3; do run "$n" "$p" $i; done
done
tar czf "$OUT/runs.tar.gz" -C "$RUNS" .
grep -E "^== " "$LOG" | tail -40
