#!/usr/bin/env bash
# Programs that sleep on completion events, next to their baselines on loopback, each pair
# measured in the same run, rounds interleaved (A B A B ...): medians and the median of
# the pairs' ratios.
#   - qperf -cm1 rc_lat (RDMA, waits on CQ events) against qperf tcp_lat (blocking TCP)
#   - perftest's ib_send_lat -e (sleeps on its channel) against ib_send_lat (polls), typical
#   - riostream 64 B round trip / 2 (the receiver spins on memory) against rstream's
# After `cargo build --release`. Installs qperf, perftest and rdmacm-utils if missing (root).
#   bash bench/events.sh            # REPS=5 rounds by default
set -euo pipefail
cd "$(dirname "$0")/.."
# Loopback only (with nothing set, the devices follow the host's interfaces).
export OXRDMA_DEVICES=${OXRDMA_DEVICES:-oxr0=lo}
REPS=${REPS:-5}
need=()
command -v qperf >/dev/null || need+=(qperf)
command -v ib_send_lat >/dev/null || need+=(perftest)
command -v riostream >/dev/null || need+=(rdmacm-utils)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
lib=${LIB:-$PWD/target/release}
[ -e "$lib/librdmacm.so.1" ] || { echo "build first: cargo build --release" >&2; exit 1; }
port=$((30000 + $$ % 5000))
work=$(mktemp -d)
qsrv=
trap '[ -n "$qsrv" ] && kill $qsrv 2>/dev/null; rm -rf "$work"' EXIT

# qperf's server serves every test on its own port.
qport=$((port + 900))
LD_LIBRARY_PATH=$lib qperf -lp $qport >/dev/null 2>&1 &
qsrv=$!
sleep 0.5
# One qperf test: its latency in us. `qp TEST`
qp() {
  LD_LIBRARY_PATH=$lib timeout 60 qperf -cm1 -lp $qport 127.0.0.1 -t 2 -m 64 "$1" 2>/dev/null |
    awk '/latency/ { v = $3; if ($4 == "ms") v *= 1000; if ($4 == "ns") v /= 1000; print v }'
}
# One perftest latency run: its typical (us). `pt TOOL FLAGS`
pt() {
  port=$((port + 1))
  LD_LIBRARY_PATH=$lib timeout 60 $1 $2 -n 10000 -p $port >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  LD_LIBRARY_PATH=$lib timeout 60 $1 $2 -n 10000 -p $port 127.0.0.1 2>/dev/null |
    awk '/^ *[0-9]+ +[0-9]+/ { t = $5 } END { print t }'
  wait $srv || true
}
# One rstream or riostream 64 B ping-pong: us per transfer. `rs TOOL`
rs() {
  port=$((port + 1))
  LD_LIBRARY_PATH=$lib timeout 120 $1 -p $port -S 64 -C 1 -I 5000 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.4
  LD_LIBRARY_PATH=$lib timeout 120 $1 -s 127.0.0.1 -p $port -S 64 -C 1 -I 5000 |
    awk '$1 == "custom" { print $8 }'
  wait $srv || true
}
# shellcheck source=bench/median.sh
. bench/median.sh

# name | command | baseline
cases=(
  "qperf rc_lat / tcp_lat, us|qp rc_lat|qp tcp_lat"
  "ib_send_lat -e / polling, typical us|pt ib_send_lat -e|pt ib_send_lat ''"
  "riostream / rstream 64 B, us|rs riostream|rs rstream"
)
pairs 40 measured baseline
