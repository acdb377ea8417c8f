#!/usr/bin/env bash
# iWARP against TCP across a veth pair (two network namespaces, Ethernet's MTU: FPDUs of
# one TCP segment each), in the same run: 64 KiB RDMA WRITE goodput over iWARP
# (`oxrdma iwarp-perf write-bw`) against iperf3 with 64 KiB writes, and the 8 B WRITE
# ping-pong's half round trip against a TCP ping-pong whose ends spin on non-blocking
# sockets (bench/iwarp.sh's C program). As root. Rounds alternate; medians and the median of
# the pairs' ratios.
#
#   bash bench/iwarp_veth.sh        # REPS=5 rounds; needs iperf3 and a release build
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/median.sh
. bench/veth_pair.sh
REPS=${REPS:-5}
OX=$(realpath "${OXRDMA_BIN:-target/release/oxrdma}")
work=$(mktemp -d)
A=oxiwa$$ B=oxiwb$$
trap 'ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$work"' EXIT
veth_pair "$A" "$B" oxiw
port() { echo $((20000 + RANDOM % 20000)); }

iwarp_bw() {
  local p; p=$(port)
  ip netns exec "$A" "$OX" iwarp-perf write-bw --bind 10.99.0.1 -p "$p" -n 20000 >/dev/null 2>&1 &
  local s=$! out=""
  for _ in $(seq 50); do
    out=$(ip netns exec "$B" "$OX" iwarp-perf write-bw 10.99.0.1 -p "$p" -n 20000 --json 2>/dev/null) && break
    sleep 0.05
  done
  wait "$s" || true
  echo "$out" | awk -F'"gbps":' '{split($2, a, ","); printf "%.1f\n", a[1] * 1000 / 8}'
}
tcp_bw() {
  local p; p=$(port)
  ip netns exec "$A" iperf3 -s -1 -B 10.99.0.1 -p "$p" >/dev/null 2>&1 &
  local s=$!
  sleep 0.3
  ip netns exec "$B" iperf3 -c 10.99.0.1 -p "$p" -l 64K -n 1280M -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))'
  wait "$s" || true
}
iwarp_lat() {
  local p; p=$(port)
  ip netns exec "$A" "$OX" iwarp-perf write-lat --bind 10.99.0.1 -p "$p" -n 50000 >/dev/null 2>&1 &
  local s=$! out=""
  for _ in $(seq 50); do
    out=$(ip netns exec "$B" "$OX" iwarp-perf write-lat 10.99.0.1 -p "$p" -n 50000 --json 2>/dev/null) && break
    sleep 0.05
  done
  wait "$s" || true
  echo "$out" | awk -F'"half_rtt_us":' '{split($2, a, "[,}]"); printf "%.3f\n", a[1]}'
}
# The TCP ping-pong of bench/iwarp.sh, built here, its server on 10.99.0.1.
sed -n '/^cat > "\$work\/pp.c"/,/^C$/p' bench/iwarp.sh | sed '1d;$d' |
  sed 's/"127.0.0.1"/"10.99.0.1"/' > "$work/pp.c"
gcc -O2 -o "$work/pp" "$work/pp.c"
tcp_lat() {
  local p; p=$(port)
  ip netns exec "$A" "$work/pp" "$p" 50000 server &
  local s=$!
  ip netns exec "$B" "$work/pp" "$p" 50000
  wait "$s" || true
}
cases=(
  "64 KiB WRITE goodput over a veth pair, MB/s (iWARP / iperf3)|iwarp_bw|tcp_bw"
  "8 B half round trip over a veth pair, us (iWARP / TCP ping-pong)|iwarp_lat|tcp_lat"
)
pairs 62 oxrdma TCP
