#!/usr/bin/env bash
# Batch agreement run on a single-GPU host (no Rust toolchain needed there): run from the repository root with
# .hwcarry/cuorder-hw (a stripped release build). A small smoke batch first (with full observations), then the big
# batch of generated single-GPU programs. Writes under $OUT: machine.txt, smoke.pack, smoke.log, cover.pack,
# batch.log, full.tar.gz (full observations of runs that did not complete and of the named programs).
# usage: hw/scripts/device-batch.sh SEED COUNT BUDGET_S [FULL_PROGRAMS]
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
seed=$1; count=$2; budget=$3; full=${4:-cover-0}
OUT=${OUT:-/tmp/cuorder-batch-out}
B=$PWD/.hwcarry/cuorder-hw
chmod +x "$B"
mkdir -p "$OUT/full" "$OUT/full-smoke"
{ nvidia-smi; nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv; nproc; } >"$OUT/machine.txt" 2>&1
timeout -s KILL 120 "$B" batch --seed 0 --count 40 --out "$OUT/smoke.pack" --full-dir "$OUT/full-smoke" \
  --full cover-0,cover-1,cover-2,cover-3 --timeout-ms 3000 2>&1 | tee "$OUT/smoke.log"
echo "== smoke exit $?" | tee -a "$OUT/smoke.log"
timeout -s KILL $((budget + 90)) "$B" batch --seed "$seed" --count "$count" --out "$OUT/cover.pack" \
  --full-dir "$OUT/full" --full "$full" --timeout-ms 3000 --budget-s "$budget" 2>&1 | tee "$OUT/batch.log"
echo "== batch exit $?" | tee -a "$OUT/batch.log"
tar czf "$OUT/full.tar.gz" -C "$OUT" full full-smoke && rm -rf "$OUT/full" "$OUT/full-smoke"
ls -la "$OUT"
