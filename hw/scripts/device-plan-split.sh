#!/usr/bin/env bash
# Rule N14 on the single-GPU host: how many kernel plans NCCL cuts one group of N self send/recv pairs into
# (hw/scripts/plan-split.py, CUDA graph capture). Writes $OUT/plan-split.jsonl and $OUT/plan-split-log.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cuorder-plan-split-out}
mkdir -p "$OUT"
{ nvidia-smi -L; python3 --version; } >"$OUT/plan-split-log.txt" 2>&1
timeout -s KILL 300 python3 hw/scripts/plan-split.py >"$OUT/plan-split.jsonl" 2>>"$OUT/plan-split-log.txt"
echo "exit $?" >>"$OUT/plan-split-log.txt"
tail -5 "$OUT/plan-split-log.txt"; cat "$OUT/plan-split.jsonl"
