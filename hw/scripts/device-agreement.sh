#!/usr/bin/env bash
# Runs every program in the given folders on the GPUs with cuorder-hw (each an isolated run under the watchdog)
# and packs the observations into one archive (the device tool brings back at most 8 files).
# usage: device-agreement.sh BIN OUTDIR BUDGET_S TIMEOUT_S DIR...
#   BUDGET_S   stop starting new runs after this many seconds (keep it under the call's limit)
#   TIMEOUT_S  watchdog for each run's program part (hangs are normal results)
set -u
bin=$1; out=$2; budget=$3; to=$4; shift 4
export NCCL_NVLS_ENABLE=0
mkdir -p "$out/traces"
log="$out/agreement.log"
start=$(date +%s)
n=0
for d in "$@"; do
  for p in "$d"/*.ron; do
    if (( $(date +%s) - start > budget )); then echo "budget of ${budget} s reached after $n programs" | tee -a "$log"; break 2; fi
    stem=$(basename "$p" .ron)
    t0=$(date +%s%N)
    "$bin" run "$p" --out "$out/traces/$stem.ron" --timeout-s "$to" --setup-timeout-s 60 >"$out/traces/$stem.log" 2>&1
    rc=$?
    t1=$(date +%s%N)
    outcome=$(grep -m1 -o 'outcome: [A-Za-z]*' "$out/traces/$stem.ron" 2>/dev/null | cut -d' ' -f2)
    echo "$stem rc=$rc outcome=${outcome:-none} ms=$(( (t1 - t0) / 1000000 ))" >>"$log"
    n=$((n + 1))
  done
done
elapsed=$(( $(date +%s) - start ))
echo "ran $n programs in ${elapsed} s" | tee -a "$log"
tar czf "$out/traces.tar.gz" -C "$out" traces && rm -rf "$out/traces"
awk '{print $3}' "$log" | sort | uniq -c
