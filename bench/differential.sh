#!/usr/bin/env bash
# Differential check of the timed engine (issue 9): runs `cuorder time` of two binaries on the same programs with the
# same options and reports every difference in stdout, stderr, exit code or `--timeline` file. A change to the engine
# that is meant to keep its output (a faster data structure, a shortcut) must report none.
#
# Programs: every `.ron` program under examples/, tests/cases/, hw/programs/ and bench/, 1F1B, GPipe and interleaved
# pipelines from `cuorder gen pipeline` (correct, --bug, --race) and one all-reduce over 8 to 128 ranks. Each runs
# with six option sets: none; --seed 3 --max-steps 40; --seed 11 --jitter 5000; --format json --seed 1;
# --costs ideal; --profile eager.
#
# Usage: bench/differential.sh OLD_BIN [NEW_BIN]   NEW_BIN defaults to target/release/cuorder. Prints the number of
# runs compared and each difference; exit 0 when there are none, 1 otherwise.
source "$(dirname "$0")/common.sh"
OLD=${1:?usage: bench/differential.sh OLD_BIN [NEW_BIN]}
NEW=${2:-$BIN}
mkdir -p "$TMP/progs"
progs=()
while IFS= read -r f; do progs+=("$f"); done < <(find examples tests/cases hw/programs bench -maxdepth 2 -name '*.ron' | sort)
n=0
for sched in 1f1b gpipe interleaved; do
    sizes="4:4 8:3 16:8 64:4 256:8"
    [ "$sched" = interleaved ] && sizes="4:4 4:8 8:8 16:16"
    for sm in $sizes; do
        IFS=: read -r s m <<<"$sm"
        for variant in "" "--bug" "--race"; do
            extra=()
            [ "$sched" = interleaved ] && extra=(--chunks 2)
            f="$TMP/progs/$sched-$s-$m${variant//-/_}.ron"
            if "$OLD" gen pipeline --schedule "$sched" --stages "$s" --microbatches "$m" "${extra[@]}" $variant -o "$f" >/dev/null 2>&1; then
                progs+=("$f")
            fi
        done
    done
done
for r in 8 32 128; do
    f="$TMP/progs/allreduce-$r.ron"
    cat >"$f" <<RON
Program(ranks: $r, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB")], comms: [Comm("world")],
    threads: [Thread("main", [AllReduce(buf: "x", stream: "s0"), StreamSync("s0")])])
RON
    progs+=("$f")
done
opts=("" "--seed 3 --max-steps 40" "--seed 11 --jitter 5000" "--format json --seed 1" "--costs ideal" "--profile eager")
diffs=0
for p in "${progs[@]}"; do
    for o in "${opts[@]}"; do
        for side in old new; do
            bin=$OLD
            [ $side = new ] && bin=$NEW
            # shellcheck disable=SC2086
            "$bin" time $o --timeline "$TMP/$side.tl" "$p" >"$TMP/$side.out" 2>"$TMP/$side.err" && rc=0 || rc=$?
            echo "$rc" >"$TMP/$side.rc"
            [ -f "$TMP/$side.tl" ] || : >"$TMP/$side.tl"
        done
        n=$((n + 1))
        for x in out err rc tl; do
            if ! cmp -s "$TMP/old.$x" "$TMP/new.$x"; then
                echo "differs ($x): time $o $p"
                diffs=$((diffs + 1))
            fi
        done
        rm -f "$TMP/old.tl" "$TMP/new.tl"
    done
done
echo "$n runs of ${#progs[@]} programs compared; $diffs difference(s)"
[ "$diffs" -eq 0 ]
