#!/bin/sh
# Regenerates every committed output of examples/streams/ (run from the repository root):
#   X.check.txt   cuorder check X.ron              (the verdict; exit 1 = a problem found, expected for the races)
#   X.time.txt    cuorder time X.ron --lanes 80    (text report and text timeline of one timed execution)
#   X.trace.json  cuorder time X.ron --timeline    (Chrome trace; open in https://ui.perfetto.dev)
# CUORDER names the binary (default: target/release/cuorder).
set -u
C=${CUORDER:-target/release/cuorder}
for f in examples/streams/L*.ron; do
    b=${f%.ron}
    "$C" check "$f" --color never > "$b.check.txt"
    "$C" time "$f" --costs h200-nvlink --lanes 80 --color never > "$b.time.txt"
    "$C" time "$f" --costs h200-nvlink --timeline "$b.trace.json" > /dev/null
done
q=examples/streams/L10-event-query-both-answers
"$C" run "$q.ron" --seed 0 --color never > "$q.run-seed0.txt"
"$C" run "$q.ron" --seed 10 --color never > "$q.run-seed10.txt"
exit 0
