#!/usr/bin/env bash
# What idle iWARP connections cost the busy one: the 8 B WRITE ping-pong's half round
# trip (`oxrdma iwarp-perf write-lat`, both ends spinning) with IDLE idle connections
# opened beside it on both engines, against none, in the same run. Rounds alternate;
# medians and the median of the pairs' ratios (1.00: idle streams cost nothing).
#
#   bash bench/iwarp_idle.sh       # REPS=5 rounds, IDLE=500; needs a release build
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/median.sh
REPS=${REPS:-5}
IDLE=${IDLE:-500}
ITERS=${ITERS:-20000}
OX=${OXRDMA_BIN:-target/release/oxrdma}
port() { echo $((20000 + RANDOM % 20000)); }

lat() {  # lat IDLE: the client's half round trip, us
    local p; p=$(port)
    "$OX" iwarp-perf write-lat --bind 127.0.0.1 -p "$p" -n "$ITERS" --idle "$1" --json > /dev/null &
    local srv=$!
    sleep 0.3
    "$OX" iwarp-perf write-lat 127.0.0.1 -p "$p" -n "$ITERS" --idle "$1" --json |
        sed -n 's/.*"half_rtt_us":\([0-9.]*\).*/\1/p'
    wait "$srv"
}

none=() busy=() ratios=()
for _ in $(seq "$REPS"); do
    a=$(lat 0); b=$(lat "$IDLE")
    none+=("$a"); busy+=("$b")
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')")
    echo "round: none $a us, $IDLE idle $b us"
done
med() { printf '%s\n' "$@" | median; }
echo "8 B WRITE half round trip, median of $REPS: none $(med "${none[@]}") us," \
    "$IDLE idle connections $(med "${busy[@]}") us; ratio $(med "${ratios[@]}")"
