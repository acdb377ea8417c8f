#!/usr/bin/env bash
# Two builds of `oxrdma perf` side by side: OLD=path/to/oxrdma (say, a build of the commit
# before a change) against this tree's, rounds interleaved (old, new, old, new, ...), on
# loopback (64 KiB WRITE, READ and SEND bandwidth, 64 KiB WRITE over 64 QPs, 8 B WRITE and
# SEND half round trips) and, as root, across a veth pair with MTU 1500 (64 KiB WRITE, 8 B
# WRITE half round trip; veth_write_cpu, the writer's CPU ms per GB, only if named).
# NAMES="..." picks figures.
# Prints each figure's medians and the median of the new/old ratios taken pair by pair.
#   OLD=/tmp/old/oxrdma REPS=5 bash bench/ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
: "${OLD:?OLD=path to the other build of oxrdma}"
cargo build --release -q -p oxrdma-cli
NEW=$PWD/target/release/oxrdma
ns=(oxab-a-$$ oxab-b-$$)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
VETH=${VETH:-$([ "$(id -u)" = 0 ] && echo 1 || echo 0)}
if [ "$VETH" = 1 ]; then
  # shellcheck source=bench/veth_pair.sh
  . bench/veth_pair.sh
  veth_pair "${ns[0]}" "${ns[1]}" oxab
fi
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1"; }
# veth BIN FIELD TEST ARGS...: `perf TEST ARGS` between the two namespaces (server in the
# second), FIELD of the client's JSON.
veth() {
  local ox=$1 f=$2; shift 2
  local p=$(( 20000 + RANDOM % 9000 ))
  ip netns exec "${ns[1]}" "$ox" perf "$@" -d 10.99.0.2 -p "$p" --json >/dev/null 2>&1 &
  local s=$!; pids+=($s)
  sleep 0.3
  ip netns exec "${ns[0]}" "$ox" perf "$@" -d 10.99.0.1 -p "$p" --json 10.99.0.2 | field "$f"
  wait "$s" 2>/dev/null || true
}
# fig BIN NAME: one figure from binary BIN.
fig() {
  local ox=$1
  case $2 in
    write_bw) "$ox" perf write-bw --loopback -s 65536 -n 20000 --json | field bw_avg_gbps ;;
    read_bw) "$ox" perf read-bw --loopback -s 65536 -n 20000 --json | field bw_avg_gbps ;;
    send_bw) "$ox" perf send-bw --loopback -s 65536 -n 20000 --json | field bw_avg_gbps ;;
    write_bw_q64) "$ox" perf write-bw --loopback -s 65536 -D 2 -q 64 --json | field bw_avg_gbps ;;
    write_lat) "$ox" perf write-lat --loopback -s 8 -n 20000 --json | field median_us ;;
    send_lat) "$ox" perf send-lat --loopback -s 8 -n 20000 --json | field median_us ;;
    veth_write_bw) veth "$ox" bw_avg_gbps write-bw -s 65536 -n 10000 ;;
    veth_write_cpu) veth "$ox" cpu_client_ms_per_gb write-bw -s 65536 -n 10000 --cpu-util ;;
    veth_write_lat) veth "$ox" median_us write-lat -s 8 -n 20000 ;;
  esac
}
names=(write_bw read_bw send_bw write_bw_q64 write_lat send_lat)
[ "$VETH" = 1 ] && names+=(veth_write_bw veth_write_lat)
# NAMES="write_lat veth_write_lat" takes those figures alone.
[ -n "${NAMES:-}" ] && read -r -a names <<<"$NAMES"
# shellcheck source=bench/median.sh
. bench/median.sh
declare -A old new ratio
for r in $(seq "$REPS"); do
  for n in "${names[@]}"; do
    o=$(fig "$OLD" "$n"); w=$(fig "$NEW" "$n")
    old[$n]+="$o "; new[$n]+="$w "
    ratio[$n]+="$(echo "$w / $o" | bc -l) "
  done
  echo "round $r done" >&2
done
printf '%-16s %12s %12s %14s\n' figure old new "new/old (pairs)"
for n in "${names[@]}"; do
  printf '%-16s %12.3f %12.3f %14.3f\n' "$n" "$(tr ' ' '\n' <<<"${old[$n]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${new[$n]}" | grep . | median)" "$(tr ' ' '\n' <<<"${ratio[$n]}" | grep . | median)"
done
echo "(bandwidths in Gb/s, latencies in us: a ratio above 1 is faster for bandwidth, slower for latency)"
