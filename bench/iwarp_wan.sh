#!/usr/bin/env bash
# iWARP over a long, lossy path next to TCP on the same path, in the same run (issue 60:
# "over the emulated 50 ms path at 1 % loss >= 0.9x TCP"): two network namespaces joined
# by `oxrdma path-emu`, `oxrdma iwarp-perf write-bw -s 1048576 -D $SECS` (iWARP's
# recovery is TCP's) against single-stream iperf3, rounds interleaved.
#   LOSS=0.01 bash bench/iwarp_wan.sh   # as root; DELAY_MS=25 RATE=200 QUEUE_MS=100
#                                       # SECS=10 REPS=3
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "iwarp_wan: needs root (network namespaces, TUN)" >&2; exit 1; }
LOSS=${LOSS:-0.01} DELAY_MS=${DELAY_MS:-25} RATE=${RATE:-200} QUEUE_MS=${QUEUE_MS:-100}
SECS=${SECS:-10} REPS=${REPS:-3}
# shellcheck source=bench/path_emu.sh
. bench/path_emu.sh
path_emu_up oxiww
A=10.99.0.1 B=10.99.0.2
echo "# path: ${DELAY_MS} ms each way, ${RATE} Mbit/s, ${QUEUE_MS} ms queue, loss $LOSS each way"
ox_round() {
  ip netns exec $b "$ox" iwarp-perf write-bw --bind $B -p 5202 -s 1048576 -D "$SECS" \
    > "$work/oxs" 2>&1 &
  local s=$!
  sleep 0.5
  ip netns exec $a "$ox" iwarp-perf write-bw $B -p 5202 -s 1048576 -D "$SECS" --json \
    > "$work/oxc" 2>&1
  local rc=$?
  wait $s
  if [ $rc -ne 0 ]; then
    echo "    oxrdma failed: $(head -2 "$work/oxc" | tr '\n' ' ')" >&2
    echo 0
    return
  fi
  grep '^{' "$work/oxc" | tail -1 | sed 's/.*"gbps":\([0-9.e+-]*\).*/\1/' |
    awk '{ printf "%.1f\n", $1 * 1000 }'
}
tcp_round() {
  ip netns exec $b iperf3 -s -1 -p 5201 > /dev/null 2>&1 &
  local s=$!
  sleep 0.5
  ip netns exec $a iperf3 -c $B -p 5201 -t "$SECS" -J > "$work/tcp" 2>/dev/null
  wait $s
  grep -A8 '"sum_received"' "$work/tcp" | awk -F'[:,]' '/bits_per_second/ { printf "%.1f\n", $2 / 1e6; exit }'
}
# shellcheck source=bench/median.sh
. bench/median.sh
: > "$work/o"; : > "$work/t"; : > "$work/r"
for i in $(seq "$REPS"); do
  o=$(ox_round); t=$(tcp_round)
  echo "round $i: iWARP $o Mbit/s, TCP $t Mbit/s"
  echo "$o" >> "$work/o"; echo "$t" >> "$work/t"
  awk -v o="$o" -v t="$t" 'BEGIN { if (t > 0) printf "%.3f\n", o / t }' >> "$work/r"
done
echo "median: iWARP $(median < "$work/o") Mbit/s, TCP $(median < "$work/t") Mbit/s, ratio $(median < "$work/r")"
