#!/usr/bin/env bash
# Does a list of work requests per ibv_post_send pay? Debian's ib_write_bw on the C library,
# two processes on this host, 8 B WRITEs: with -l 32 (32 WRs chained per ibv_post_send) and
# -l 1 (one WR per call), in turn, REPS rounds; prints each round's message rates and the
# median ratio (-l 32 / -l 1). LIB (default target/release) is the library's directory.
#   bash bench/post_list.sh            REPS=5 ITERS=500000
set -euo pipefail
cd "$(dirname "$0")/.."
LIB=${LIB:-$PWD/target/release}
REPS=${REPS:-5}
ITERS=${ITERS:-500000}
command -v ib_write_bw >/dev/null || { echo "needs perftest (apt-get install perftest)" >&2; exit 1; }
port=$((21000 + $$ % 1000))
rate() { # $1: -l value; prints the Mpps of one run
  port=$((port + 1))
  env OXRDMA_DEVICES=oxr0=lo LD_LIBRARY_PATH="$LIB" ib_write_bw -d oxr0 -s 8 -n "$ITERS" -l "$1" -p $port >/dev/null 2>&1 &
  local srv=$! out="" i
  for i in $(seq 50); do
    sleep 0.1
    out=$(env OXRDMA_DEVICES=oxr0=lo LD_LIBRARY_PATH="$LIB" ib_write_bw -d oxr0 -s 8 -n "$ITERS" -l "$1" -p $port localhost 2>/dev/null) && break
  done
  wait $srv || true
  echo "$out" | awk '$1 == 8 { print $NF }'
}
ratios=()
for r in $(seq "$REPS"); do
  one=$(rate 1); list=$(rate 32)
  ratio=$(awk -v a="$list" -v b="$one" 'BEGIN { printf "%.3f", a / b }')
  echo "round $r: -l 1 $one Mpps, -l 32 $list Mpps, ratio $ratio"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "median ratio (-l 32 / -l 1): %s\n", v[int((NR + 1) / 2)] }'
