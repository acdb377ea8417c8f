#!/usr/bin/env bash
# Where the CPU goes in a 64 KiB RDMA WRITE stream, in milliseconds per GB moved: every CPU
# is sampled with perf (cpu-clock: this VM has no hardware counters) while `oxrdma perf
# write-bw` runs, and each sample is put in the bucket of what it pays for (the ICRC, the
# payload copies in user space and in the kernel, the kernel's other send and receive work,
# sleeping and waking, CQ polling, the rest of oxrdma), per thread.
#   bash bench/profile.sh           # loopback, RoCE MTU 4096
#   bash bench/profile.sh veth      # two namespaces joined by a veth pair with MTU 1500
#                                   # (RoCE MTU 1024, an Ethernet LAN; root)
# ITERS=30000 messages by default. Installs perf from Debian if missing (root).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-loopback}
ITERS=${ITERS:-30000}
HZ=5000
# shellcheck source=bench/record_write_bw.sh
. bench/record_write_bw.sh
# Every CPU as root (the kernel's share included); otherwise the run's own threads, as far
# as perf_event_paranoid lets a user see them (the veth path needs root anyway).
scope=(-a)
[ "$(id -u)" = 0 ] || scope=()
record_write_bw "$MODE" "$ITERS" "${scope[@]}" -e cpu-clock -F "$HZ"
perf report -q -i "$tmp/perf.data" --stdio --no-children -g none --percent-limit 0 \
  --sort pid,sym -F period,pid,sym 2>/dev/null >"$tmp/report.txt"
python3 - "$tmp/run.json" "$tmp/report.txt" "$MODE" "$ITERS" <<'EOF'
import json, re, sys
run = json.load(open(sys.argv[1]))
mode, iters = sys.argv[3], int(sys.argv[4])
gb = iters * 65536 / 1e9
# First match wins: the ICRC before copies (crc32fast's loops are its own symbols).
buckets = [
    ("ICRC (compute, verify, solve the IPv4 ID)", r"crc32fast|icrc|IdVerifier|seal_as|UdpPort::check"),
    ("payload copies, user space", r"SharedBuffer::(read|write)|memory::bulk|mr::gather|memmove|memcpy"),
    ("payload copies, kernel", r"_copy_to_iter|_copy_from_iter|__check_object_size|copy_user"),
    ("sleeping and waking", r"^\[k\] .*(schedule|finish_task_switch|sched_yield|futex|wake|"
     r"_raw_spin_unlock_irqrestore|safe_halt|epoll)|lock_contended|sched_yield|Sleeper|"
     r"nic::engine_thread"),
    ("CQ polling", r"CompletionQueue::poll|ArrayQueue|Side::poll|Shared::polled|CqRing|poll_cq"),
    ("kernel: rest of UDP/IP send and receive", r"^\[k\]"),
    ("oxrdma: rest of the transport and driver", r"^\[\.\]"),
]
by_bucket = {name: 0 for name, _ in buckets}
by_thread, idle, total = {}, 0, 0
for line in open(sys.argv[2]):
    m = re.match(r"\s*(\d+)\s+(-?\d+):(\S*)\s+(\[[k.]\] .*)$", line)
    if not m:
        continue
    period, tid, comm, sym = int(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
    if tid == "0":
        idle += period
        continue
    total += period
    thread = f"{comm} (thread {tid})"
    by_thread[thread] = by_thread.get(thread, 0) + period
    for name, pat in buckets:
        if re.search(pat, sym):
            by_bucket[name] += period
            break
    else:
        by_bucket["oxrdma: rest of the transport and driver"] += period
ms_per_gb = lambda p: p / 1e6 / gb  # cpu-clock periods are nanoseconds
print(f"{mode}: 64 KiB WRITE, {iters} messages ({gb:.2f} GB), {run['bw_avg_gbps']:.1f} Gb/s;"
      f" --cpu-util: client {run['cpu_client_ms_per_gb']:.0f}, server"
      f" {run['cpu_server_ms_per_gb']:.0f} ms/GB")
print(f"sampled CPU: {ms_per_gb(total):.0f} ms/GB busy, {ms_per_gb(idle):.0f} ms/GB idle")
print(f"{'bucket':<46} {'ms/GB':>7} {'share':>6}")
for name, _ in buckets:
    p = by_bucket[name]
    print(f"{name:<46} {ms_per_gb(p):7.1f} {100 * p / max(total, 1):5.1f}%")
print(f"{'thread':<46} {'ms/GB':>7} {'share':>6}")
for t, p in sorted(by_thread.items(), key=lambda x: -x[1]):
    if p / max(total, 1) >= 0.005:
        print(f"{t:<46} {ms_per_gb(p):7.1f} {100 * p / max(total, 1):5.1f}%")
EOF
