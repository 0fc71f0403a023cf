#!/usr/bin/env bash
# bench/simgrid.sh: runs SimGrid/SMPI on the same 1F1B pipeline beside `cuorder time` and prints, per point
# (S stages = ranks, M microbatches), the wall time and peak memory of both simulators, their ratio, and the
# makespans both predict. Issue 9 item 5.
#
# Usage: bench/simgrid.sh [S:M ...]
#   Points default to every S in $STAGES (default "64 128 256 512 1024") with every M in $MICROBATCHES (default
#   "8 64"); give S:M arguments (e.g. `bench/simgrid.sh 1024:64 2048:8`) to pick points instead.
#   Env: BYTES (message size, default 16777216 = the 16 MiB of `gen pipeline`), LIMIT (seconds per simulator run,
#   default 180; a run past it prints TIMEOUT), CUORDER (binary, default target/release/cuorder), KEEP=1 keeps the
#   temporary directory (programs, platforms, logs) and prints its path, SMPICC / SMPIRUN name other SimGrid tools
#   (SMPICC=none shows the SimGrid-less output).
#   Needs /usr/bin/time (GNU time: wall seconds and peak RSS via -f '%e %M'). SimGrid: Debian `libsimgrid-dev`
#   (smpicc, smpirun); without it the script says so, prints the cuorder columns only and exits 0.
#
# What is compared (all inputs are deterministic; cuorder runs with --seed 0):
#   - cuorder: `cuorder gen pipeline --schedule 1f1b --stages S --microbatches M --bytes BYTES`, then `cuorder time
#     --format json` under two cost models: "ab", the built-in `ideal` model with the NVLink latency and bandwidth of
#     `cuorder costs h200-nvlink` (kernel durations + α-β per message, nothing else: the same model SMPI is given),
#     and the built-in `h200-nvlink` (adds launch/event/host overheads, 100 ms connection set-up per new peer, and
#     network links between 8-GPU nodes), timed too.
#   - SimGrid: bench/simgrid/pipeline_1f1b.c (the same schedule as MPI Isend/Irecv/Waitall per Megatron p2p call)
#     compiled with smpicc, run by smpirun on bench/simgrid/platform.sh's platform (S hosts of 1 Gf, private
#     SPLITDUPLEX links, route latency and bandwidth = the NVLink α-β above), with the CM02 network model (plain
#     latency + size/bandwidth: no SMPI piecewise factors, no TCP window limit, no cross-traffic), simulated compute
#     only (smpi/simulate-computation:no), no privatization (the program has no mutable globals) and no payload
#     copies (untouched buffers, a no-op SMPI copy callback: no real 16 MiB traffic). Its makespan is MPI_Wtime
#     on rank 0 at the end of the schedule (rank 0 runs the last backward of 1F1B).
# Columns: cuorder_s/MB and simgrid_s/MB = wall seconds and peak RSS (MiB) of one process each (smpirun's simulator
# is one process too), cuorder under the "ab" model; ratio = simgrid_s / cuorder_s; ab_ms and simgrid_ms = predicted
# makespans, diff_ns = ab - simgrid in nanoseconds; h200_s, h200_MB, h200_ms = cuorder's wall seconds, peak RSS and
# makespan under the full h200-nvlink model (its run time differs from the "ab" run: see bench/simgrid/RESULTS.md).
set -u
cd "$(dirname "$0")/.."
BIN=${CUORDER:-target/release/cuorder}
BYTES=${BYTES:-16777216}
LIMIT=${LIMIT:-180}
STAGES=${STAGES:-"64 128 256 512 1024"}
MICROBATCHES=${MICROBATCHES:-"8 64"}
SMPICC=${SMPICC:-smpicc}
SMPIRUN=${SMPIRUN:-smpirun}
[ -x "$BIN" ] || { echo "no cuorder binary at $BIN: cargo build --release (or set CUORDER)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (Debian package: time)" >&2; exit 2; }
TMP=$(mktemp -d)
if [ "${KEEP:-0}" = 1 ]; then echo "# temporary files kept in $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

if [ $# -gt 0 ]; then
  POINTS="$*"
else
  POINTS=""
  for s in $STAGES; do for m in $MICROBATCHES; do POINTS="$POINTS $s:$m"; done; done
fi

# The NVLink α-β of the built-in cost model, and a cost model with only those (the `ideal` model otherwise).
"$BIN" costs h200-nvlink >"$TMP/h200.ron"
read -r LAT_NS BW < <(awk '/nvlink: \(/ {n=1} n && /latency_ns/ {gsub(/[^0-9]/, ""); l=$0}
  n && /bandwidth_bytes_per_s/ {gsub(/[^0-9]/, ""); print l, $0; exit}' "$TMP/h200.ron")
"$BIN" costs ideal | awk -v lat="$LAT_NS" -v bw="$BW" '
  /name:/ {sub(/"ideal"/, "\"alpha-beta-nvlink\"")}
  /nvlink: \(/ {n=1}
  n && /latency_ns/ {sub(/[0-9]+/, lat)}
  n && /bandwidth_bytes_per_s/ {sub(/[0-9]+/, bw); n=0}
  {print}' >"$TMP/ab.ron"

HAVE_SG=0
if command -v "$SMPICC" >/dev/null 2>&1 && command -v "$SMPIRUN" >/dev/null 2>&1; then
  if "$SMPICC" -O2 -o "$TMP/pipeline_1f1b" bench/simgrid/pipeline_1f1b.c >"$TMP/smpicc.log" 2>&1; then
    HAVE_SG=1
  else
    echo "# smpicc failed (see below); printing cuorder figures only"; cat "$TMP/smpicc.log"
  fi
else
  echo "# SimGrid/SMPI is not installed (smpicc/smpirun not found; Debian: apt-get install libsimgrid-dev):"
  echo "# printing cuorder figures only"
fi

echo "# cuorder binary $BIN ($("$BIN" --version 2>/dev/null | awk '{print $NF}'), repository HEAD $(git rev-parse --short HEAD 2>/dev/null || echo '?'))," \
  "$([ $HAVE_SG = 1 ] && "$SMPIRUN" -version 2>&1 | head -1 || echo 'no SimGrid')"
echo "# NVLink alpha-beta: ${LAT_NS} ns, ${BW} B/s; message ${BYTES} B; limit ${LIMIT} s per run;" \
  "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%6s %4s %10s %10s %10s %10s %7s %12s %12s %8s %8s %8s %14s\n' \
  S M cuorder_s cuorder_MB simgrid_s simgrid_MB ratio ab_ms simgrid_ms diff_ns h200_s h200_MB h200_ms

# timed OUT_PREFIX CMD...: runs CMD under the limit with GNU time; sets SECS, MB, RC.
timed() {
  local out=$1; shift
  /usr/bin/time -f '%e %M' -o "$out.time" timeout "$LIMIT" "$@" >"$out.out" 2>"$out.err"; RC=$?
  SECS=$(awk 'END {print $1}' "$out.time"); MB=$(awk 'END {printf "%.0f", $2 / 1024}' "$out.time")
  case $RC in 124|137) SECS="TIMEOUT"; MB="-" ;; esac
}

for p in $POINTS; do
  s=${p%%:*}; m=${p##*:}
  prog="$TMP/1f1b-${s}x$m.ron"
  if ! "$BIN" gen pipeline --schedule 1f1b --stages "$s" --microbatches "$m" --bytes "$BYTES" -o "$prog"; then
    echo "gen pipeline failed for $p" >&2; continue
  fi
  timed "$TMP/ab-$p" "$BIN" time "$prog" --costs "$TMP/ab.ron" --seed 0 --format json
  c_s=$SECS c_mb=$MB
  ab_ms=$(awk -F'[:,]' '/"makespan_ns"/ {printf "%.6f", $2 / 1e6; exit}' "$TMP/ab-$p.out")
  timed "$TMP/h200-$p" "$BIN" time "$prog" --costs h200-nvlink --seed 0 --format json
  h_s=$SECS h_mb=$MB
  h200_ms=$(awk -F'[:,]' '/"makespan_ns"/ {printf "%.6f", $2 / 1e6; exit}' "$TMP/h200-$p.out")
  rm -f "$prog"
  g_s=- g_mb=- g_ms= ratio=- diff=-
  if [ $HAVE_SG = 1 ]; then
    bench/simgrid/platform.sh "$s" "$LAT_NS" "$BW" "$TMP/platform-$s.xml" "$TMP/hosts-$s.txt"
    timed "$TMP/sg-$p" "$SMPIRUN" -np "$s" -platform "$TMP/platform-$s.xml" -hostfile "$TMP/hosts-$s.txt" \
      --cfg=smpi/privatization:no --cfg=smpi/simulate-computation:no --cfg=smpi/display-timing:yes \
      --cfg=network/model:CM02 --cfg=network/TCP-gamma:0 --cfg=network/crosstraffic:0 \
      --log=root.thres:warning --log=smpi_utils.thres:info \
      "$TMP/pipeline_1f1b" "$m" "$BYTES"
    g_s=$SECS g_mb=$MB
    g_ms=$(awk '/^makespan_s/ {printf "%.6f", $2 * 1e3; exit}' "$TMP/sg-$p.out")
    if [ -n "$g_ms" ] && [ "$g_s" != TIMEOUT ] && [ "$c_s" != TIMEOUT ]; then
      ratio=$(awk -v a="$g_s" -v b="$c_s" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "inf"}')
    fi
    if [ -n "$g_ms" ] && [ -n "$ab_ms" ]; then
      diff=$(awk -v a="$ab_ms" -v b="$g_ms" 'BEGIN {printf "%+.0f", (a - b) * 1e6}')
    fi
  fi
  printf '%6s %4s %10s %10s %10s %10s %7s %12s %12s %8s %8s %8s %14s\n' \
    "$s" "$m" "$c_s" "$c_mb" "$g_s" "$g_mb" "$ratio" "${ab_ms:--}" "${g_ms:--}" "$diff" "$h_s" "$h_mb" "${h200_ms:--}"
done
exit 0
