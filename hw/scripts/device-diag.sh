#!/usr/bin/env bash
# Second hardware session: why did the ungrouped 2 GiB send-first program fail with an illegal memory access instead of
# hanging? Runs variants (NCCL's own log, no marker kernels, just under 2 GiB, 256 MiB, 1 MiB) with a 10 s watchdog,
# then the single-GPU program again to show the GPUs are usable after the killed runs. Same layout as device-smoke.sh.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cuorder-hw-out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
BIN=$PWD/hwbin/cuorder-hw
WORK=/tmp/cuorder-hw-work
mkdir -p "$WORK"
chmod +x hwbin/cuorder-hw 2>/dev/null
run() { # name program timeout env...
  local name=$1 prog=$2 t=$3
  shift 3
  echo "== run $name ($prog, $*)" >>"$LOG"
  local s
  s=$(date +%s%N)
  env "$@" timeout -s KILL 240 "$BIN" run "hwbin/$prog.ron" --out "$OUT/$name.ron" --timeout-s "$t" \
    --work-dir "$WORK/$name" --keep-work-dir >>"$LOG" 2>&1
  echo "== $name: exit $?, wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >>"$LOG"
}
run send_first_2gib_info send_first_2gib 10 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,ENV
run send_first_2gib_nomarkers send_first_2gib 10 NCCL_DEBUG=WARN CUORDER_HW_NO_MARKERS=1
run send_first_2047mib send_first_2047mib 10 NCCL_DEBUG=WARN
run send_first_256mib send_first_256mib 10 NCCL_DEBUG=WARN
run send_first_1mib send_first_1mib 10 NCCL_DEBUG=WARN
run kernel_write_read_after kernel_write_read 10
nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv >>"$LOG" 2>&1
tar czf "$OUT/workdirs.tar.gz" -C "$WORK" . 2>/dev/null
grep -vE "^  r[0-9]+t[0-9]+#" "$LOG" | tail -c 6000
for f in "$WORK"/*/rank*.out; do echo "--- $f"; grep -E "WARN|Cuda failure|P2P|via" "$f" | head -8; done | tail -c 5500
