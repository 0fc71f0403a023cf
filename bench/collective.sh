#!/usr/bin/env bash
# Scale of a collective's first use in timed runs (issue 9; the new-user report of 2026-12-03): times `cuorder time`
# (release, profile `portable`, costs h200-nvlink, one core) on one all-reduce over N ranks followed by a stream
# synchronize. Its first use sets up a connection between every pair of members (N7: N (N - 1) / 2 set-ups), so
# the steps grow as N²; before 2026-12-03 each set-up recomputed every member and 128 ranks took 10 s.
# Prints a Markdown table: N, steps, seconds, peak RSS (MiB), microseconds per step.
#
# Usage: bench/collective.sh [NS]   NS: space-separated rank counts (default "64 128 256 512 1024").
# Build first: cargo build --release. Needs /usr/bin/time (Debian package `time`).
source "$(dirname "$0")/common.sh"
NS=${1:-"64 128 256 512 1024"}
echo "| N | steps | time (s) | peak RSS (MiB) | µs per step |"
echo "| --- | --- | --- | --- | --- |"
for n in $NS; do
    f="$TMP/ar$n.ron"
    cat >"$f" <<RON
// One all-reduce over $n ranks, then a stream synchronize.
Program(ranks: $n, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB")], comms: [Comm("world")],
    threads: [Thread("main", [AllReduce(buf: "x", stream: "s0"), StreamSync("s0")])])
RON
    /usr/bin/time -f '%e %M' -o "$TMP/t" "$BIN" time --format json "$f" >"$TMP/out.json" 2>/dev/null || true
    steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["time"]["steps"])' "$TMP/out.json")
    read -r te tm < <(tail -1 "$TMP/t")
    per=$(python3 -c "print(f'{$te * 1e6 / $steps:.2f}')")
    echo "| $n | $steps | $te | $((tm / 1024)) | $per |"
done
