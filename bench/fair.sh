#!/usr/bin/env bash
# Sharing one bottleneck: two oxrdma flows, then one oxrdma flow and one TCP flow, through
# `oxrdma path-emu` (25 ms each way, 200 Mbit/s, a 100 ms tail-drop queue; LOSS=0 by
# default), each pair started together and run for $SECS seconds. Prints each flow's
# average and, for the two oxrdma flows, Jain's fairness index (1: equal shares).
#   bash bench/fair.sh          # as root; SECS=30 DELAY_MS=25 RATE=200 QUEUE_MS=100 LOSS=0
# The second flow of each pair uses a second address on each side (10.99.0.3 -> .4).
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "fair: needs root (network namespaces, TUN)" >&2; exit 1; }
LOSS=${LOSS:-0} DELAY_MS=${DELAY_MS:-25} RATE=${RATE:-200} QUEUE_MS=${QUEUE_MS:-100}
SECS=${SECS:-30}
# shellcheck source=bench/path_emu.sh
. bench/path_emu.sh
path_emu_up oxf
ip -n $a addr add 10.99.0.3/24 dev oxpath0
ip -n $b addr add 10.99.0.4/24 dev oxpath0
echo "# path: ${DELAY_MS} ms each way, ${RATE} Mbit/s, ${QUEUE_MS} ms queue${ECN_MS:+ marking CE past $ECN_MS ms}, loss $LOSS each way; ${SECS} s"
# ox_flow NAME CLIENT SERVER PORT: an oxrdma write-bw flow in the background.
ox_flow() {
  ip netns exec $b "$ox" perf write-bw -d "$3" -p "$4" -s 1048576 -D "$SECS" -m 1024 \
    --json --no-progress > "$work/$1.s" 2>&1 &
  sleep 0.3
  ip netns exec $a "$ox" perf write-bw -d "$2" -p "$4" -s 1048576 -D "$SECS" -m 1024 \
    --json --no-progress "$3" > "$work/$1.c" 2>&1 &
}
# resent NAME: the flow's request packets sent and sent again, its smoothed RTT at the end
# and the CNPs it received.
resent() {
  grep '^{' "$work/$1.c" | tail -1 |
    sed 's/.*"packets_sent":\([0-9]*\),"packets_resent":\([0-9]*\).*"srtt_us":\([0-9.e+-]*\).*"cnps_received":\([0-9]*\).*/\1 \2 \3 \4/' |
    awk -v n="$1" '{ printf "  %s: %d packets sent, %d of them again (%.2f %%), srtt %.1f ms, %d CNPs\n", n, $1, $2, 100 * $2 / $1, $3 / 1000, $4 }'
}
mbit() {
  grep '^{' "$work/$1.c" | tail -1 | sed 's/.*"bw_avg_gbps":\([0-9.e+-]*\).*/\1/' |
    awk '{ printf "%.1f\n", $1 * 1000 }'
}
ox_flow one 10.99.0.1 10.99.0.2 18515
ox_flow two 10.99.0.3 10.99.0.4 18516
sleep "$SECS"; sleep 3; wait $(jobs -p | grep -v "^$emu$") 2>/dev/null
x1=$(mbit one) x2=$(mbit two)
echo "two oxrdma flows: $x1 and $x2 Mbit/s, Jain's index $(awk -v a="$x1" -v b="$x2" 'BEGIN { s = a + b; q = a * a + b * b; if (q > 0) printf "%.3f", s * s / (2 * q) }')"
resent one; resent two
ip netns exec $b iperf3 -s -1 -p 5201 > /dev/null 2>&1 &
sleep 0.3
ox_flow three 10.99.0.3 10.99.0.4 18517
ip netns exec $a iperf3 -c 10.99.0.2 -p 5201 -t "$SECS" -J > "$work/tcp" 2>/dev/null
sleep 3; wait $(jobs -p | grep -v "^$emu$") 2>/dev/null
x3=$(mbit three)
resent three
t=$(grep -A8 '"sum_received"' "$work/tcp" | awk -F'[:,]' '/bits_per_second/ { printf "%.1f\n", $2 / 1e6; exit }')
echo "oxrdma and TCP: $x3 and $t Mbit/s (shares $(awk -v a="$x3" -v b="$t" 'BEGIN { s = a + b; if (s > 0) printf "%.2f and %.2f", a / s, b / s }'))"
kill "$emu" && wait "$emu" 2>/dev/null
emu=
echo "delay line: $(tail -1 "$work/emu")"
