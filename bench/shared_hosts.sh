#!/usr/bin/env bash
# Two hosts (network namespaces joined by veth, bench/veth_pair.sh), N processes on each
# sharing its one address (N = 1, 2, 8): N `oxrdma perf` pairs at once, servers on
# 10.99.0.1, clients on 10.99.0.2, and N pairs of rdma-core's cmtime on the C library
# (OXRDMA_DEVICES naming the host's address). Prints, per N, medians over REPS rounds of:
# the pairs' median 8 B WRITE half round trip, their aggregate 64 KiB WRITE bandwidth, and
# cmtime's connection setup (us per connection, the pairs' median). Needs root.
#   REPS=3 bash bench/shared_hosts.sh     (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
OX=$PWD/target/release/oxrdma
LIB=$PWD/target/release
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
ns=(oxsh-a-$$ oxsh-b-$$)
cleanup() {
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
# shellcheck source=bench/veth_pair.sh
. bench/veth_pair.sh
veth_pair "${ns[0]}" "${ns[1]}" oxsh
# shellcheck source=bench/median.sh
. bench/median.sh
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1"; }
out=$(mktemp -d)
trap 'cleanup; rm -rf "$out"' EXIT

# pairs N TEST ARGS...: N perf pairs at once; each client's JSON in $out/c.K.
pairs() {
  local n=$1 k base=$(( 20000 + RANDOM % 9000 )); shift
  local srv=()
  for k in $(seq "$n"); do
    ip netns exec "${ns[0]}" "$OX" perf "$@" -d 10.99.0.1 -p $((base + k)) --json >/dev/null 2>&1 &
    srv+=($!)
  done
  sleep 0.5
  local cli=()
  for k in $(seq "$n"); do
    ip netns exec "${ns[1]}" "$OX" perf "$@" -d 10.99.0.2 -p $((base + k)) --json 10.99.0.1 \
      >"$out/c.$k" 2>/dev/null &
    cli+=($!)
  done
  wait "${cli[@]}" "${srv[@]}"
}

# cmtimes N: N cmtime pairs at once; "us / conn" of each client's connect line.
cmtimes() {
  local n=$1 k base=$(( 30000 + RANDOM % 9000 ))
  local srv=() cli=()
  for k in $(seq "$n"); do
    ip netns exec "${ns[0]}" env LD_LIBRARY_PATH="$LIB" OXRDMA_DEVICES=oxr0=10.99.0.1 \
      cmtime -p $((base + k)) >/dev/null 2>&1 &
    srv+=($!)
  done
  sleep 0.5
  for k in $(seq "$n"); do
    ip netns exec "${ns[1]}" env LD_LIBRARY_PATH="$LIB" OXRDMA_DEVICES=oxr0=10.99.0.2 \
      cmtime -s 10.99.0.1 -p $((base + k)) -c 100 >"$out/m.$k" 2>&1 &
    cli+=($!)
  done
  wait "${cli[@]}"
  kill "${srv[@]}" 2>/dev/null || true
  wait "${srv[@]}" 2>/dev/null || true
  for k in $(seq "$n"); do awk '$1 == "connect" { print $NF }' "$out/m.$k"; done | median
}

printf '%-10s %16s %20s %22s\n' processes "8B WRITE lat us" "64KiB WRITE Gb/s sum" "cmtime connect us/conn"
for n in 1 2 8; do
  lat=() bw=() cm=()
  for _ in $(seq "$REPS"); do
    pairs "$n" write-lat -s 8 -n 5000
    lat+=("$(for k in $(seq "$n"); do field median_us <"$out/c.$k"; done | median)")
    pairs "$n" write-bw -s 65536 -D 2
    bw+=("$(for k in $(seq "$n"); do field bw_avg_gbps <"$out/c.$k"; done | paste -sd+ | bc -l)")
    cm+=("$(cmtimes "$n")")
  done
  printf '%-10s %16.2f %20.2f %22.1f\n' "$n" "$(printf '%s\n' "${lat[@]}" | median)" \
    "$(printf '%s\n' "${bw[@]}" | median)" "$(printf '%s\n' "${cm[@]}" | median)"
done
