#!/usr/bin/env bash
# Hardware smoke run of cuorder-hw on a GPU host (no Rust toolchain needed there): run from the repository root with
# the folder hwbin/ holding `cuorder-hw`, `gpu-tests` (the hw/tests/gpu.rs test binary) and the smoke programs
# (`cuorder-hw smoke-programs --dir hwbin`). Writes each observation, a log and the runs' files under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cuorder-hw-out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
BIN=$PWD/hwbin/cuorder-hw
WORK=/tmp/cuorder-hw-work
mkdir -p "$WORK"
chmod +x hwbin/cuorder-hw hwbin/gpu-tests 2>/dev/null
{
  echo "== machine"
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv
  nvidia-smi topo -m
  ldconfig -p | grep -E "libnvrtc|libnccl|libcuda\." | head
  echo "== cuorder-hw env"
  timeout -s KILL 60 "$BIN" env
} >>"$LOG" 2>&1
for p in kernel_write_read sendrecv_grouped_1mib send_first_2gib send_first_2gib_grouped; do
  echo "== run $p" >>"$LOG"
  s=$(date +%s%N)
  timeout -s KILL 240 "$BIN" run "hwbin/$p.ron" --out "$OUT/$p.ron" --timeout-s 20 --work-dir "$WORK/$p" \
    --keep-work-dir >>"$LOG" 2>&1
  rc=$?
  echo "== $p: exit $rc, wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >>"$LOG"
done
echo "== gpu tests" >>"$LOG"
CUORDER_HW_BIN=$BIN timeout -s KILL 200 hwbin/gpu-tests --nocapture --test-threads=1 >"$OUT/gputest.txt" 2>&1
echo "== gpu tests exit $?" >>"$LOG"
grep -E "^test |test result" "$OUT/gputest.txt" >>"$LOG"
nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv >>"$LOG" 2>&1
tar czf "$OUT/workdirs.tar.gz" -C "$WORK" . 2>/dev/null
grep -vE "^  r[0-9]+t[0-9]+#" "$LOG" | tail -c 11000
