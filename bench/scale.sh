#!/usr/bin/env bash
# Scale of timed runs (issue 9): times `cuorder time` (release, default profile `portable`, costs h200-nvlink, one
# process, one core) on `cuorder gen pipeline --schedule 1f1b` programs, and the load alone (`--max-steps 1`), and
# prints a Markdown table: S x M, steps, load seconds, total seconds, user CPU seconds, peak RSS (MiB), microseconds per step.
#
# Usage: bench/scale.sh [POINTS]   POINTS: space-separated S:M (default "64:8 128:8 256:8 512:8 1024:8 2048:8 4096:8
#        64:64 256:64 1024:64"). Build first: cargo build --release. Needs /usr/bin/time (Debian package `time`).
source "$(dirname "$0")/common.sh"
POINTS=${1:-"64:8 128:8 256:8 512:8 1024:8 2048:8 4096:8 64:64 256:64 1024:64"}
echo "| S × M | steps | load (s) | total (s) | user CPU (s) | peak RSS (MiB) | µs per step (run only) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for p in $POINTS; do
    IFS=: read -r s m <<<"$p"
    f="$TMP/p-${s}x$m.ron"
    "$BIN" gen pipeline --schedule 1f1b --stages "$s" --microbatches "$m" -o "$f" >/dev/null
    /usr/bin/time -f '%e %U %M' -o "$TMP/load" "$BIN" time --max-steps 1 "$f" >/dev/null 2>&1 || true
    /usr/bin/time -f '%e %U %M' -o "$TMP/full" "$BIN" time --format json "$f" >"$TMP/out.json" 2>/dev/null || true
    steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["time"]["steps"])' "$TMP/out.json")
    read -r le _ _ < <(tail -1 "$TMP/load")
    read -r te tu tm < <(tail -1 "$TMP/full")
    per=$(python3 -c "print(f'{max(0.0, ($te - $le)) * 1e6 / $steps:.2f}')")
    echo "| $s × $m | $steps | $le | $te | $tu | $((tm / 1024)) | $per |"
    rm -f "$f"
done
