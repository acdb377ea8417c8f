#!/usr/bin/env bash
# rsockets on oxrdma next to the kernel's TCP on loopback, the same programs, measured
# in the same run, rounds interleaved (A B A B ...), medians and the ratio of each pair:
#   - rstream (rdmacm-utils): 1 MiB stream bandwidth and 64 B ping-pong half round trip,
#     on rsockets vs on TCP sockets (-T s: the same program on the kernel's stack), in
#     its default non-blocking mode and blocking (-T b)
#   - iperf3 single stream, 5 s: under librspreload.so (rsockets) vs plain (TCP)
# After `cargo build --release`. Installs iperf3 and rdmacm-utils if missing (as root).
#   bash bench/rsocket.sh            # REPS=5 rounds by default
set -euo pipefail
cd "$(dirname "$0")/.."
# Loopback only (with nothing set, the devices follow the host's interfaces).
export OXRDMA_DEVICES=${OXRDMA_DEVICES:-oxr0=lo}
REPS=${REPS:-5}
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v rstream >/dev/null || need+=(rdmacm-utils)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
lib=$PWD/target/release
[ -e "$lib/librdmacm.so.1" ] || { echo "build first: cargo build --release" >&2; exit 1; }
preload=$(ls /usr/lib/*/rsocket/librspreload.so | head -1)
port=$((30000 + $$ % 5000))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One rstream run: prints its figure (Gb/s or usec/xfer column). `rs MODE SIZE COUNT ITERS COL`
rs() {
  local mode=$1 size=$2 count=$3 iters=$4 col=$5 srv
  port=$((port + 1))
  LD_LIBRARY_PATH=$lib timeout 120 rstream $mode -p $port -S $size -C $count -I $iters \
    >/dev/null 2>&1 &
  srv=$!
  sleep 0.3
  LD_LIBRARY_PATH=$lib timeout 120 rstream $mode -s 127.0.0.1 -p $port -S $size -C $count \
    -I $iters | awk -v c=$col '$1 == "custom" { print $c }'
  wait $srv || true
}
# One iperf3 run: Gb/s received. `ip3 PRELOAD`
ip3() {
  local pre=$1 srv
  port=$((port + 1))
  LD_LIBRARY_PATH=$lib LD_PRELOAD=$pre timeout 60 iperf3 -s -1 -p $port >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  LD_LIBRARY_PATH=$lib LD_PRELOAD=$pre timeout 60 iperf3 -J -c 127.0.0.1 -p $port -t 5 |
    grep -A8 '"sum_received"' | awk -F'[:,]' '/bits_per_second/ { printf "%.2f\n", $2 / 1e9; exit }'
  wait $srv || true
}
# shellcheck source=bench/median.sh
. bench/median.sh

# name | command for rsockets | command for TCP
cases=(
  "rstream 1 MiB bandwidth, Gb/s|rs '' 1048576 2000 1 7|rs '-T s' 1048576 2000 1 7"
  "rstream 1 MiB bandwidth, blocking, Gb/s|rs '-T b' 1048576 2000 1 7|rs '-T s -T b' 1048576 2000 1 7"
  "rstream 64 B round trip / 2, us|rs '' 64 1 20000 8|rs '-T s' 64 1 20000 8"
  "rstream 64 B round trip / 2, blocking, us|rs '-T b' 64 1 20000 8|rs '-T s -T b' 64 1 20000 8"
  "iperf3 one stream, Gb/s|ip3 $preload|ip3 ''"
)
pairs 44 rsockets TCP
