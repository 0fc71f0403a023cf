#!/usr/bin/env bash
# Times `cuorder check` (release, default profile `portable`, one process) on `cuorder gen pipeline` programs and
# prints one line per point: schedule, S x M, verdict or TIMEOUT, seconds, peak RSS.
#
# Usage: bench/pipeline.sh [TIMEOUT_SECONDS]   (default 60; env POINTS overrides the list, e.g. POINTS="1f1b:8:8";
#        env PROFILE picks the profile, default portable)
# Build first: cargo build --release. Peak RSS comes from /usr/bin/time -v when present.
set -u
cd "$(dirname "$0")/.."
LIMIT=${1:-60}
BIN=target/release/cuorder
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
POINTS=${POINTS:-"1f1b:2:2 1f1b:2:4 1f1b:4:4 1f1b:8:8 1f1b:16:16 1f1b:64:64 interleaved:4:4 interleaved:8:8 interleaved:16:16 interleaved:64:64"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HAVE_TIME=0; [ -x /usr/bin/time ] && HAVE_TIME=1
printf '%-12s %-8s %-28s %10s %12s\n' schedule SxM verdict seconds peak_RSS_MiB
for p in $POINTS; do
  IFS=: read -r sched s m <<<"$p"
  f="$TMP/$sched-${s}x$m.ron"
  "$BIN" gen pipeline --schedule "$sched" --stages "$s" --microbatches "$m" -o "$f" || continue
  start=$(date +%s.%N)
  if [ $HAVE_TIME = 1 ]; then
    /usr/bin/time -v -o "$TMP/time" timeout "$LIMIT" "$BIN" check --profile "${PROFILE:-portable}" "$f" >"$TMP/out" 2>&1; rc=$?
    # With -v, a command killed by timeout still gets its resources printed.
    rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$TMP/time")
  else
    timeout "$LIMIT" "$BIN" check --profile "${PROFILE:-portable}" "$f" >"$TMP/out" 2>&1; rc=$?; rss="?"
  fi
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  case $rc in
    0) verdict="ok" ;; 1) verdict="problem found" ;; 3) verdict="inconclusive (state limit)" ;;
    124|137) verdict="TIMEOUT at ${LIMIT}s" ;; *) verdict="error rc=$rc" ;;
  esac
  printf '%-12s %-8s %-28s %10.2f %12s\n' "$sched" "${s}x$m" "$verdict" "$secs" "$rss"
done
