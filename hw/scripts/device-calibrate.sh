#!/usr/bin/env bash
# Calibration run on a 2-GPU host (no Rust toolchain needed there): run from the repository root with hwbin/cuorder-hw
# (a release build). Writes under $OUT: profiles/NAME.ron (the profile), NAME.measurements.ron (the sidecar),
# calibrate.log (progress, notes, the profile) and probes.tar.gz (every probe's folder: program, rank logs, NCCL
# output, observation; the machine's nvidia-smi output; the PyTorch-NCCL comparison runs).
# Afterwards, when PyTorch's NCCL is installed (python3 -c 'import nvidia.nccl'), the three first-contact probes run
# once more with that library (CUORDER_NCCL_LIB), to compare N7 across NCCL versions.
# Extra arguments go to `cuorder-hw calibrate`.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cuorder-calibrate-out}
W=/tmp/cal
BIN=$PWD/hwbin/cuorder-hw
chmod +x "$BIN" 2>/dev/null
rm -rf "$W"
mkdir -p "$W/probes" "$OUT/profiles"
LOG=$OUT/calibrate.log
{ nvidia-smi; nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv
  ldconfig -p | grep -E "libnccl|libnvrtc"; "$BIN" env; } >"$W/machine.txt" 2>&1
s=$(date +%s)
timeout -s KILL 400 "$BIN" calibrate --out-dir "$OUT/profiles" --measurements-dir "$OUT" --probe-dir "$W/probes" "$@" 2>&1 \
  | tee "$LOG"
echo "== calibrate exit $?, wall $(( $(date +%s) - s )) s" | tee -a "$LOG"

T=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
if [ -n "$T" ] && [ -f "$T" ]; then
  "$BIN" calibration-programs --dir "$W/programs" >/dev/null
  for p in n7-first-contact-ungrouped-1024 n7-first-contact-grouped-1024 n7-late-peer-1024; do
    echo "== $p with CUORDER_NCCL_LIB=$T" | tee -a "$LOG"
    CUORDER_NCCL_LIB=$T timeout -s KILL 30 "$BIN" run "$W/programs/$p.ron" --out "$W/torch-nccl-$p.ron" --timeout-s 4 \
      --setup-timeout-s 30 --work-dir "$W/torch-nccl-$p" --keep-work-dir 2>&1 | grep -vE "^  r[0-9]+t[0-9]+#" | tee -a "$LOG"
  done
else
  echo "== no PyTorch NCCL (python3 -c 'import nvidia.nccl' failed): no comparison run" | tee -a "$LOG"
fi
tar czf "$OUT/probes.tar.gz" -C /tmp cal 2>/dev/null
ls -la "$OUT" "$OUT/profiles" | tee -a "$LOG"
