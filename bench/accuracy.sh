#!/usr/bin/env bash
# Predicted (`cuorder time`, costs h200-nvlink, the calibrated H200 profile) against measured, for every hardware
# run under traces/hw/{seed,agree}-2026-11-29 whose program has kernels (the generated gen-* programs are skipped:
# their kernels are 10 us stamps and their runs are dominated by connection set-up). Prints a Markdown table.
# Usage: bench/accuracy.sh [path to cuorder]   (default target/release/cuorder; build with cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
C=${1:-target/release/cuorder}
P=traces/profiles/h200x2-nvlink-nccl2.28.3.ron
echo "| run | measured makespan | predicted | error | kernels | kernel end: median abs error | max | kernel duration: median rel. error |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for d in traces/hw/seed-2026-11-29 traces/hw/agree-2026-11-29; do
    for f in "$d"/*.ron; do
        n=$(basename "$f" .ron)
        case "$n" in MANIFEST|gen-*) continue ;; esac
        prog="$d/programs/$n.ron"
        [ -f "$prog" ] || continue
        line=$("$C" time "$prog" --profile "$P" --compare "$f" --color never 2>/dev/null | tail -1) || continue
        case "$line" in "against the hardware run:"*) ;; *) continue ;; esac
        # against the hardware run: makespan measured A, predicted B (E); kernel ends over K kernels: median |error| M, max X; kernel durations: median relative error R
        echo "$line" | sed -E "s#^against the hardware run: makespan measured (.*), predicted (.*) \((.*)\); kernel ends over ([0-9]+) kernels: median \|error\| (.*), max (.*); kernel durations: median relative error (.*)\$#| $(basename "$d")/$n | \1 | \2 | \3 | \4 | \5 | \6 | \7 |#"
    done
done
