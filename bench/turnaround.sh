#!/usr/bin/env bash
# Where an 8 B RDMA WRITE ping-pong's half round trip goes beyond the kernel's floor, on
# loopback, rounds interleaved, medians printed:
#   - the floor: bench/udp_ceiling.c's raw UDP ping-pong that makes oxrdma's system calls
#     and answers with a WRITE and an ACK in one GSO message (compare.sh's floor)
#   - oxrdma perf write-lat -s 8's half round trip, and what it spends beyond the floor
#   - its turnaround (OXRDMA_TURNAROUND=1, in a run of its own: the clock reads cost): the
#     time a thread spends in user space from a receive that brought the peer's WRITE and
#     ACK to the send of its answer, the part of a half round trip the floor does not pay,
#     p50 over both sides' threads; and the receive and send calls' own time
#   - of that turnaround, the engine's work (crates/sim/examples/pingpong: two engines
#     handing each other packets in one thread, half a round trip); the rest is the UDP
#     driver (sealing, the send's message headers), the API (post, poll, locks) and perf
# Issue 38 asks the half round trip to stay within 1.15x the floor: the turnaround would
# have to fit in 0.15x the floor.
#   REPS=5 bash bench/turnaround.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
cargo build --release -q -p oxrdma-cli
cargo build --release -q -p oxrdma-sim --example pingpong
ox=./target/release/oxrdma
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/udp_ceiling" bench/udp_ceiling.c -lpthread
# shellcheck source=bench/median.sh
. bench/median.sh
lat() { "$@" perf write-lat --loopback -s 8 -n 20000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_us"])'; }
floor=(); half=(); turn=(); recv=(); send=(); engine=()
for r in $(seq "$REPS"); do
  floor+=("$("$tmp/udp_ceiling" pingpong 100000 pair)")
  half+=("$(lat "$ox")")
  OXRDMA_TURNAROUND=1 lat "$ox" 2>"$tmp/turn.txt" >/dev/null
  # Lines: "turnaround THREAD: N turnarounds: receive to send p50 X ns (...); receive call
  # p50 Y ns; send call p50 Z ns", per thread; the median over the lines of the run.
  turn+=("$(sed -n 's/.*receive to send p50 \([0-9]*\) ns.*/\1/p' "$tmp/turn.txt" | median)")
  recv+=("$(sed -n 's/.*receive call p50 \([0-9]*\) ns.*/\1/p' "$tmp/turn.txt" | median)")
  send+=("$(sed -n 's/.*send call p50 \([0-9]*\) ns.*/\1/p' "$tmp/turn.txt" | median)")
  engine+=("$(./target/release/examples/pingpong 100000 | awk '{print $4 / 2}')")
  echo "round $r: floor ${floor[-1]} us, oxrdma ${half[-1]} us, turnaround ${turn[-1]} ns, engine ${engine[-1]} ns" >&2
done
F=$(printf '%s\n' "${floor[@]}" | median); H=$(printf '%s\n' "${half[@]}" | median)
T=$(printf '%s\n' "${turn[@]}" | median); E=$(printf '%s\n' "${engine[@]}" | median)
printf '%-52s %8.3f us\n' "floor: raw UDP ping-pong, WRITE+ACK answers" "$F"
printf '%-52s %8.3f us   %.3fx the floor (issue 38: <= 1.15x)\n' "oxrdma 8 B RDMA WRITE half round trip" "$H" "$(echo "$H / $F" | bc -l)"
printf '%-52s %8.0f ns   (1.15x allows %.0f ns)\n' "  beyond the floor" "$(echo "($H - $F) * 1000" | bc -l)" "$(echo "0.15 * $F * 1000" | bc -l)"
printf '%-52s %8.0f ns\n' "oxrdma turnaround, receive to send, p50" "$T"
printf '%-52s %8.0f ns\n' "  of it the engines' work (pingpong example)" "$E"
printf '%-52s %8.0f ns\n' "  the rest: driver, API, perf" "$(echo "$T - $E" | bc -l)"
printf '%-52s %8.0f ns receive, %.0f ns send\n' "oxrdma's receive and send calls, p50" \
  "$(printf '%s\n' "${recv[@]}" | median)" "$(printf '%s\n' "${send[@]}" | median)"
