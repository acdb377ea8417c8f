#!/usr/bin/env bash
# What each thread of a 64 KiB WRITE stream asks of the kernel: per 1,000 messages, the
# system calls that move packets (sendmmsg, recvmmsg, recvmsg), those that wait or hand
# over (epoll_pwait, futex, sched_yield) and the context switches, per thread (the
# application's, each device's engine thread, `nic-ADDR`). Counted from the kernel's
# tracepoints with perf, on every CPU, while `oxrdma perf write-bw` runs. A futex count
# near the context switches of an engine thread says it fought the application for the
# device lock; empty recvmsg calls are polls that found nothing.
#   bash bench/syscalls.sh           # loopback, one process
#   bash bench/syscalls.sh veth      # two namespaces joined by a veth pair, MTU 1500 (root)
# ITERS=40000 messages by default. Needs root (tracepoints); installs perf if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-loopback}
ITERS=${ITERS:-40000}
command -v perf >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
}
cargo build --release -q -p oxrdma-cli
ox=$PWD/target/release/oxrdma
tmp=$(mktemp -d)
ns=(oxsys-a-$$ oxsys-b-$$)
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
events=sched:sched_switch
for c in sendmmsg recvmmsg recvmsg epoll_pwait futex sched_yield; do
  events+=",syscalls:sys_enter_$c"
done
write_bw=(perf write-bw -s 65536 -n "$ITERS" --json --cpu-util)
case $MODE in
loopback)
  perf record -q -a -e "$events" -o "$tmp/perf.data" -- "$ox" "${write_bw[@]}" --loopback >"$tmp/run.json"
  ;;
veth)
  # shellcheck source=bench/veth_pair.sh
  . bench/veth_pair.sh
  veth_pair "${ns[0]}" "${ns[1]}" oxsv
  p=$((20000 + RANDOM % 9000))
  ip netns exec "${ns[1]}" "$ox" "${write_bw[@]}" -d 10.99.0.2 -p "$p" >/dev/null 2>&1 &
  spid=$!
  sleep 0.3
  perf record -q -a -e "$events" -o "$tmp/perf.data" -- \
    ip netns exec "${ns[0]}" "$ox" "${write_bw[@]}" -d 10.99.0.1 -p "$p" 10.99.0.2 >"$tmp/run.json"
  wait "$spid" || true
  spid=
  ;;
*) echo "usage: $0 [loopback|veth]" >&2; exit 2 ;;
esac
perf script -i "$tmp/perf.data" -F comm,tid,event 2>/dev/null >"$tmp/events.txt"
python3 - "$tmp/run.json" "$tmp/events.txt" "$ITERS" <<'EOF'
import collections, json, re, sys
run = json.load(open(sys.argv[1]))
per = int(sys.argv[3]) / 1000
cols = ["sendmmsg", "recvmmsg", "recvmsg", "epoll_pwait", "futex", "sched_yield", "switches"]
counts = collections.defaultdict(collections.Counter)
for line in open(sys.argv[2]):
    m = re.match(r"\s*(\S+)\s+(\d+)\s+(\S+):", line)
    if not m:
        continue
    comm, tid, event = m.groups()
    if comm != "oxrdma" and not comm.startswith("nic-"):
        continue
    name = "switches" if event == "sched:sched_switch" else event.split("sys_enter_")[-1]
    counts[f"{comm} ({tid})"][name] += 1
print(f"{run['bw_avg_gbps']:.2f} Gb/s; CPU per GB: client {run.get('cpu_client_ms_per_gb', 0):.0f} ms, "
      f"server {run.get('cpu_server_ms_per_gb', 0):.0f} ms")
print(f"{'per 1,000 messages':28}" + "".join(f"{c:>12}" for c in cols))
for thread, c in sorted(counts.items()):
    print(f"{thread:28}" + "".join(f"{c[k] / per:12.1f}" for k in cols))
EOF
