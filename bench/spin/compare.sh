#!/usr/bin/env bash
# Spin beside cuorder on the same S x M pipeline. For every point, `cuorder gen pipeline --emit promela` writes the
# pipeline at stage granularity (one proctype per stage, rendezvous channels `[0]`, Megatron's 1F1B or interleaved
# order; see sim/src/pipeline.rs), Spin checks it (`spin -a; gcc -O2 pan.c; ./pan`, safety: invalid end states =
# deadlocks), and `cuorder check` (release, profile portable) checks the full-granularity program beside it. Prints
# S, M, Spin seconds (generate + compile + search), cuorder seconds, and the ratio cuorder / spin.
#
# Usage: bench/spin/compare.sh [TIMEOUT_SECONDS]  (default 60 per tool and point; env POINTS="1f1b:2:2 ..." and
# VARIANT=--bug to compare on the deadlocking variant). Needs spin and gcc (Debian: apt-get install spin).
set -u
cd "$(dirname "$0")/../.."
LIMIT=${1:-60}
BIN=target/release/cuorder
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
if ! command -v spin >/dev/null; then
  echo "spin is not installed here: nothing to compare (Debian/Ubuntu: apt-get install spin)" >&2
  exit 3
fi
command -v gcc >/dev/null || { echo "gcc is not installed here: Spin's pan.c cannot be compiled" >&2; exit 3; }
POINTS=${POINTS:-"1f1b:2:2 1f1b:2:4 1f1b:4:4 1f1b:4:8 1f1b:8:8 1f1b:8:64 1f1b:16:16 1f1b:64:4 1f1b:64:64 interleaved:4:4 interleaved:8:8 interleaved:16:16"}
VARIANT=${VARIANT:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
now() { date +%s.%N; }
printf '%-12s %4s %4s %-22s %9s %-28s %9s %9s\n' schedule S M spin_verdict spin_s cuorder_verdict cuorder_s ratio
for p in $POINTS; do
  IFS=: read -r sched s m <<<"$p"
  d="$TMP/$sched-$s-$m"; mkdir -p "$d"
  "$BIN" gen pipeline --schedule "$sched" --stages "$s" --microbatches "$m" $VARIANT --emit promela -o "$d/model.pml" || continue
  "$BIN" gen pipeline --schedule "$sched" --stages "$s" --microbatches "$m" $VARIANT -o "$d/prog.ron" || continue
  # Spin: generate the verifier, compile it, search (-m: depth bound large enough for the longest schedule).
  t0=$(now)
  ( cd "$d" && timeout "$LIMIT" bash -c 'spin -a model.pml >spin.log 2>&1 && gcc -O2 -DSAFETY -DVECTORSZ=65536 -o pan pan.c >>spin.log 2>&1 && ./pan -m10000000 >pan.log 2>&1' ); src=$?
  t1=$(now)
  if [ $src = 124 ]; then sv="TIMEOUT at ${LIMIT}s"; ss="-"
  elif [ $src != 0 ]; then sv="error rc=$src"; ss="-"
  elif grep -q "errors: 0" "$d/pan.log"; then sv="no deadlock"; ss=$(echo "$t1 - $t0" | bc)
  else sv="deadlock"; ss=$(echo "$t1 - $t0" | bc); fi
  t0=$(now)
  timeout "$LIMIT" "$BIN" check "$d/prog.ron" >"$d/cuorder.log" 2>&1; crc=$?
  t1=$(now)
  case $crc in
    0) cv="ok"; cs=$(echo "$t1 - $t0" | bc) ;; 1) cv="problem found"; cs=$(echo "$t1 - $t0" | bc) ;;
    3) cv="inconclusive (state limit)"; cs="-" ;; 124|137) cv="TIMEOUT at ${LIMIT}s"; cs="-" ;; *) cv="error rc=$crc"; cs="-" ;;
  esac
  if [ "$ss" != "-" ] && [ "$cs" != "-" ]; then ratio=$(echo "scale=4; $cs / $ss" | bc); else ratio="-"; fi
  printf '%-12s %4s %4s %-22s %9s %-28s %9s %9s\n' "$sched" "$s" "$m" "$sv" "$ss" "$cv" "$cs" "$ratio"
done
