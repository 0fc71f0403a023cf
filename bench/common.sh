# Shared set-up of the timing scripts (sourced by bench/scale.sh and bench/collective.sh): runs from the repository
# root, checks the release binary ($BIN) and /usr/bin/time, and makes a scratch folder ($TMP) removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/cuorder
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
