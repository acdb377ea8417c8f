#!/usr/bin/env bash
# oxrdma over a long, lossy path next to TCP on the same path, in the same run: two
# network namespaces joined by `oxrdma path-emu` (TUN devices and a user-space delay
# line: one-way delay, rate, tail-drop queue, loss per direction), `oxrdma perf
# write-bw -s 1048576 -D $SECS` against single-stream iperf3, rounds interleaved.
#   LOSS=0.01 bash bench/wan.sh      # as root; DELAY_MS=25 RATE=200 QUEUE_MS=100 SECS=10
#                                    # REPS=3; ROCE_MTU=1024 (the path's MTU is 1500)
# Prints each round's figures (and any failure oxrdma reports), then the medians, the
# median of the pair ratios, and oxrdma's request packets sent per packet the data needed.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "wan: needs root (network namespaces, TUN)" >&2; exit 1; }
LOSS=${LOSS:-0.01} DELAY_MS=${DELAY_MS:-25} RATE=${RATE:-200} QUEUE_MS=${QUEUE_MS:-100}
SECS=${SECS:-10} REPS=${REPS:-3}
# shellcheck source=bench/path_emu.sh
. bench/path_emu.sh
path_emu_up oxw
A=10.99.0.1 B=10.99.0.2
echo "# path: ${DELAY_MS} ms each way, ${RATE} Mbit/s, ${QUEUE_MS} ms queue${ECN_MS:+ marking CE past $ECN_MS ms}, loss $LOSS each way"
ox_round() {
  ip netns exec $b "$ox" perf write-bw -d $B -s 1048576 -D "$SECS" -m "${ROCE_MTU:-1024}" \
    --json --no-progress > "$work/oxs" 2>&1 &
  local s=$!
  sleep 0.5
  ip netns exec $a "$ox" perf write-bw -d $A -s 1048576 -D "$SECS" -m "${ROCE_MTU:-1024}" \
    --json --no-progress $B > "$work/oxc" 2>&1
  local rc=$?
  wait $s
  if [ $rc -ne 0 ]; then
    echo "    oxrdma failed: $(grep -v '^{' "$work/oxc" | head -2 | tr '\n' ' ')" >&2
    echo 0
    return
  fi
  grep '^{' "$work/oxc" | tail -1 | sed 's/.*"bw_avg_gbps":\([0-9.e+-]*\).*/\1/' |
    awk '{ printf "%.1f\n", $1 * 1000 }'
  # Request packets sent against those the data needed (sent less those sent again).
  grep '^{' "$work/oxc" | tail -1 |
    sed 's/.*"packets_sent":\([0-9]*\),"packets_resent":\([0-9]*\).*/\1 \2/' |
    awk '{ if ($1 > $2) printf "%.4f\n", $1 / ($1 - $2) }' >> "$work/x"
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
: > "$work/o"; : > "$work/t"; : > "$work/r"; : > "$work/x"
for i in $(seq "$REPS"); do
  o=$(ox_round); t=$(tcp_round)
  echo "round $i: oxrdma $o Mbit/s, TCP $t Mbit/s"
  echo "$o" >> "$work/o"; echo "$t" >> "$work/t"
  awk -v o="$o" -v t="$t" 'BEGIN { if (t > 0) printf "%.3f\n", o / t }' >> "$work/r"
done
echo "median: oxrdma $(median < "$work/o") Mbit/s, TCP $(median < "$work/t") Mbit/s, ratio $(median < "$work/r")"
echo "oxrdma's packets sent per packet of data, median: $(median < "$work/x") ($(tr '\n' ' ' < "$work/x"))"
kill "$emu" && wait "$emu" 2>/dev/null
emu=
echo "delay line: $(tail -1 "$work/emu")"
