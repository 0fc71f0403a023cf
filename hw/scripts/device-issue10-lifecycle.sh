#!/usr/bin/env bash
# Hardware runs of issue 10's communicator life-cycle calls (N12, N13) on a single-GPU host (no Rust toolchain needed
# there): run from the repository root with .hwcarry/cuorder-hw (a stripped release build). Runs each program of
# traces/hw/issue10-lifecycle-2026-12-02/programs 3 times. Writes under $OUT: log.txt and runs.tar.gz (NAME-N.ron).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cuorder-lifecycle-out}
B=$PWD/.hwcarry/cuorder-hw
chmod +x "$B"
RUNS=/tmp/cuorder-lifecycle-runs
mkdir -p "$OUT" "$RUNS"
LOG=$OUT/log.txt
{ nvidia-smi -L; timeout -s KILL 60 "$B" env; } >>"$LOG" 2>&1
for p in traces/hw/issue10-lifecycle-2026-12-02/programs/*.ron; do
  n=$(basename "$p" .ron)
  for i in 1 2 3; do
    s=$(date +%s%N)
    timeout -s KILL 120 "$B" run "$p" --out "$RUNS/$n-$i.ron" --timeout-s 20 >>"$LOG" 2>&1
    echo "== $n-$i: exit $?, wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >>"$LOG"
  done
done
tar czf "$OUT/runs.tar.gz" -C "$RUNS" .
grep -E "^== |error|Error" "$LOG" | tail -40
