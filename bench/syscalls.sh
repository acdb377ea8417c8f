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
# shellcheck source=bench/record_write_bw.sh
. bench/record_write_bw.sh
events=sched:sched_switch
for c in sendmmsg recvmmsg recvmsg epoll_pwait futex sched_yield; do
  events+=",syscalls:sys_enter_$c"
done
record_write_bw "$MODE" "$ITERS" -a -e "$events"
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
