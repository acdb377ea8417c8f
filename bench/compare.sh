#!/usr/bin/env bash
# oxrdma RDMA WRITE over UDP on loopback next to the baselines a user would pick instead,
# measured in the same run, rounds interleaved, medians and ratios printed:
#   - 64 KiB WRITE bandwidth   vs  iperf3 single-stream TCP (127.0.0.1)
#   - 8 B WRITE half round trip vs  sockperf UDP ping-pong (p50 one-way), spinning both ends
#     (and an 8 B READ's round trip against a target that does nothing, vs twice that)
#     (and blocking both ends: the wake-up a passive WRITE target costs); and 8 B SEND
#     half round trip with both ends polling their CQ (perf send-lat: nobody sleeps, as
#     spinning sockperf), next to spinning sockperf
#   - the raw UDP ceilings on loopback (bench/udp_ceiling.c): 4128-byte datagrams (a 4 KiB
#     RoCE packet) 15 per send with GSO/GRO, and 64-byte datagrams 32 per sendmmsg, next to
#     oxrdma's 64 KiB WRITE bandwidth and 8 B WRITE message rate; and a ping-pong that makes
#     oxrdma's system calls (recvmsg, sendmmsg), the kernel's floor under its 8 B latency
#     (and one answering with a WRITE and its held ACK in one GSO message, as oxrdma does)
#   - 64 KiB READ and SEND bandwidth (-n 20000), next to WRITE's (2 s), and its CPU time per
#     GB on each side (--cpu-util)
#   - 64 KiB WRITE bandwidth with 1, 4 and 64 QPs (-q), 2 s each
#   - 64 KiB WRITE bandwidth between two network namespaces on a veth pair with MTU 1500
#     (RoCE MTU 1024, an Ethernet LAN) vs iperf3 TCP on the same pair, and the raw UDP
#     GSO/GRO ceiling of 1 KiB RoCE packets there (as root only: the namespaces are made
#     here and removed at exit; VETH=0 skips it)
# and the C library (target/release/libibverbs.so.1) under Debian's perftest, two
# processes, next to `oxrdma perf` for the same test: ib_write_bw -s 65536 and
# ib_write_lat -s 8 (t_typical, perftest's median half round trip), each against oxrdma perf
# as two processes (and -I 0: perftest inlines nothing here), each C run right after the
# oxrdma run it is compared with, the ratio also taken pair by pair.
# Installs iperf3 and sockperf from Debian if missing (needs root). Servers are started on
# random ports on 127.0.0.1 and stopped by PID.
#   bash bench/compare.sh            # REPS=5 rounds by default
set -euo pipefail
cd "$(dirname "$0")/.."
# Loopback only (with nothing set, the devices follow the host's interfaces).
export OXRDMA_DEVICES=${OXRDMA_DEVICES:-oxr0=lo}
REPS=${REPS:-5}
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v sockperf >/dev/null || need+=(sockperf)
command -v ib_write_bw >/dev/null || need+=(perftest)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release -q -p oxrdma-cli -p oxrdma-ibverbs
ox=./target/release/oxrdma
tmp=$(mktemp -d)
gcc -O2 -o "$tmp/udp_ceiling" bench/udp_ceiling.c -lpthread
pids=()
ns=(oxbench-a-$$ oxbench-b-$$)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
VETH=${VETH:-$([ "$(id -u)" = 0 ] && echo 1 || echo 0)}
if [ "$VETH" = 1 ]; then
  # shellcheck source=bench/veth_pair.sh
  . bench/veth_pair.sh
  veth_pair "${ns[0]}" "${ns[1]}" oxbv
fi
inns() { local n=$1; shift; ip netns exec "$n" "$@"; }
# perftest TOOL ARGS...: server and client on this host over the C library; the client's output.
perftest() {
  local port=$(( 30000 + RANDOM % 9000 ))
  LD_LIBRARY_PATH=$PWD/target/release "$@" -p "$port" >/dev/null 2>&1 & local spid=$!; pids+=($spid)
  sleep 0.3
  LD_LIBRARY_PATH=$PWD/target/release "$@" -p "$port" localhost
  wait "$spid" 2>/dev/null || true
}
# ox2 TEST ARGS...: oxrdma perf as two processes on 127.0.0.3 (server) and .2 (client), as
# perftest runs; the client's JSON.
ox2() {
  local port=$(( 30000 + RANDOM % 9000 ))
  "$ox" perf "$@" -d 127.0.0.3 -p "$port" --json >/dev/null 2>&1 & local spid=$!; pids+=($spid)
  sleep 0.3
  "$ox" perf "$@" -d 127.0.0.2 -p "$port" --json 127.0.0.3
  wait "$spid" 2>/dev/null || true
}
# iperf3 -J on stdin: Gb/s, then the CPU time per GB moved (ms) of the client and the server
# (each process's user + system time, as --cpu-util counts oxrdma's).
tcpjson() { python3 -c 'import json,sys; e=json.load(sys.stdin)["end"]; g=e["sum_received"]["bits_per_second"]/1e9; c=e["cpu_utilization_percent"]; print(g, c["host_total"]*80/g, c["remote_total"]*80/g)'; }
# shellcheck source=bench/median.sh
. bench/median.sh
rlat=(); tcpc=(); tcps=(); vtcpc=(); vtcps=(); vcpuc=(); vcpus=(); tcp=(); udp=(); udpb=(); floor=(); floor2=(); vgso=(); bw=(); rbw=(); sbw=(); lat=(); slat=(); lat0=(); bw2=(); cpuc=(); cpus=(); cbw=(); clat=(); vtcp=(); vbw=(); gso=(); pps=(); rate=(); q1=(); q4=(); q64=()
for r in $(seq "$REPS"); do
  p=$(( 20000 + RANDOM % 9000 ))
  iperf3 -s -1 -B 127.0.0.1 -p "$p" >/dev/null 2>&1 & pids+=($!)
  sleep 0.3
  read -r g c sv <<<"$(iperf3 -c 127.0.0.1 -p "$p" -t 2 -J | tcpjson)"
  tcp+=("$g"); tcpc+=("$c"); tcps+=("$sv")
  q=$(( 20000 + RANDOM % 9000 ))
  sockperf server -i 127.0.0.1 -p "$q" --nonblocked >/dev/null 2>&1 & spid=$!; pids+=($spid)
  sleep 0.3
  udp+=("$(sockperf ping-pong -i 127.0.0.1 -p "$q" -m 64 -t 1 --nonblocked 2>/dev/null | awk '/percentile 50.000/ {print $NF}')")
  kill "$spid" 2>/dev/null || true
  # The same with both ends asleep in recv: one wake-up per message, which is what a
  # target that spins on memory without calling in costs the engine thread.
  q=$(( 20000 + RANDOM % 9000 ))
  sockperf server -i 127.0.0.1 -p "$q" >/dev/null 2>&1 & spid=$!; pids+=($spid)
  sleep 0.3
  udpb+=("$(sockperf ping-pong -i 127.0.0.1 -p "$q" -m 64 -t 1 2>/dev/null | awk '/percentile 50.000/ {print $NF}')")
  kill "$spid" 2>/dev/null || true
  floor+=("$("$tmp/udp_ceiling" pingpong 100000)")
  floor2+=("$("$tmp/udp_ceiling" pingpong 100000 pair)")
  # 2 s, as iperf3's run: a 0.3 s run (-n 10000 across veth) gave a higher and noisier CPU
  # per GB (veth client 419 and 513 ms, against 355-371 for 2 s and 379-384 for 1 s).
  j=$($ox perf write-bw --loopback -s 65536 -D 2 --json --cpu-util)
  bw+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["bw_avg_gbps"])' "$j")")
  cpuc+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["cpu_client_ms_per_gb"])' "$j")")
  cpus+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["cpu_server_ms_per_gb"])' "$j")")
  # Each C library run right after oxrdma perf's of the same test, both as two processes: a
  # pair sees the same machine, and the ratio is taken pair by pair.
  bw2+=("$(ox2 write-bw -s 65536 -n 20000 | python3 -c 'import json,sys; print(json.load(sys.stdin)["bw_avg_gbps"])')")
  cbw+=("$(perftest ib_write_bw -s 65536 -n 20000 --report_gbits | awk '$1 == "65536" {print $4}')")
  rbw+=("$($ox perf read-bw --loopback -s 65536 -n 20000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bw_avg_gbps"])')")
  sbw+=("$($ox perf send-bw --loopback -s 65536 -n 20000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bw_avg_gbps"])')")
  lat+=("$($ox perf write-lat --loopback -s 8 -n 20000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_us"])')")
  slat+=("$($ox perf send-lat --loopback -s 8 -n 20000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_us"])')")
  # A READ's whole round trip, its target doing nothing (its engine thread alone answers).
  rlat+=("$($ox perf read-lat --loopback -s 8 -n 20000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_us"])')")
  # perftest sends nothing inline on this library (its device table does not know it): the
  # same test for oxrdma perf is -I 0.
  lat0+=("$(ox2 write-lat -s 8 -I 0 -n 20000 | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_us"])')")
  clat+=("$(perftest ib_write_lat -s 8 -n 20000 | awk '$1 == "8" {print $5}')")
  for q in 1 4 64; do
    v=$($ox perf write-bw --loopback -s 65536 -D 2 -q "$q" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bw_avg_gbps"])')
    eval "q$q+=($v)"
  done
  gso+=("$("$tmp/udp_ceiling" gso 4128 15 1 | awk '{print $1 * 8 / 1000}')")
  pps+=("$("$tmp/udp_ceiling" pps 64 32 1)")
  rate+=("$($ox perf write-bw --loopback -s 8 -n 100000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["msg_rate_mpps"])')")
  if [ "$VETH" = 1 ]; then
    p=$(( 20000 + RANDOM % 9000 ))
    inns "${ns[1]}" iperf3 -s -1 -B 10.99.0.2 -p "$p" >/dev/null 2>&1 & pids+=($!)
    sleep 0.3
    read -r g c sv <<<"$(inns "${ns[0]}" iperf3 -c 10.99.0.2 -p "$p" -t 2 -J | tcpjson)"
    vtcp+=("$g"); vtcpc+=("$c"); vtcps+=("$sv")
    p=$(( 20000 + RANDOM % 9000 ))
    inns "${ns[1]}" "$ox" perf write-bw -d 10.99.0.2 -p "$p" -s 65536 -D 2 --json >/dev/null 2>&1 & spid=$!; pids+=($spid)
    sleep 0.3
    read -r g c sv <<<"$(inns "${ns[0]}" "$ox" perf write-bw -d 10.99.0.1 -p "$p" -s 65536 -D 2 --json --cpu-util 10.99.0.2 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["bw_avg_gbps"], j["cpu_client_ms_per_gb"], j["cpu_server_ms_per_gb"])')"
    vbw+=("$g"); vcpuc+=("$c"); vcpus+=("$sv")
    wait "$spid" 2>/dev/null || true
    # 1040-byte datagrams (a 1 KiB RoCE packet), 62 per send (64 KiB at most per message).
    vgso+=("$(inns "${ns[1]}" "$tmp/udp_ceiling" gso 1040 62 1 10.99.0.2 "${ns[0]}" | awk '{print $1 * 8 / 1000}')")
    echo "round $r (veth MTU 1500): tcp ${vtcp[-1]} Gb/s, oxrdma write-bw ${vbw[-1]} Gb/s, raw UDP GSO ${vgso[-1]} Gb/s" >&2
  fi
  echo "round $r: tcp ${tcp[-1]} Gb/s, oxrdma write-bw ${bw[-1]} Gb/s (read ${rbw[-1]}, send ${sbw[-1]}), C ib_write_bw ${cbw[-1]} Gb/s (oxrdma two processes ${bw2[-1]}), udp p50 ${udp[-1]} us (blocking ${udpb[-1]}), oxrdma write-lat ${lat[-1]} us (two processes, -I 0: ${lat0[-1]}), C ib_write_lat ${clat[-1]} us, UDP GSO ${gso[-1]} Gb/s, UDP ${pps[-1]} Mpps, oxrdma 8 B ${rate[-1]} Mpps, -q 1/4/64 ${q1[-1]}/${q4[-1]}/${q64[-1]} Gb/s" >&2
done
T=$(printf '%s\n' "${tcp[@]}" | median); B=$(printf '%s\n' "${bw[@]}" | median)
U=$(printf '%s\n' "${udp[@]}" | median); L=$(printf '%s\n' "${lat[@]}" | median)
printf 'median of %d rounds\n' "$REPS"
printf '%-44s %10.3f Gb/s\n' "iperf3 TCP single stream (127.0.0.1)" "$T"
printf '%-44s %10.1f ms client, %.1f ms server\n' "  its CPU per GB moved" "$(printf '%s\n' "${tcpc[@]}" | median)" "$(printf '%s\n' "${tcps[@]}" | median)"
printf '%-44s %10.3f Gb/s   ratio %.3f (target >= 1.5)\n' "oxrdma 64 KiB RDMA WRITE bandwidth" "$B" "$(echo "$B / $T" | bc -l)"
CC=$(printf '%s\n' "${cpuc[@]}" | median); CS=$(printf '%s\n' "${cpus[@]}" | median)
printf '%-44s %10.1f ms client (post, poll, send), %.1f ms server (receive, place)\n' "  its CPU per GB moved" "$CC" "$CS"
RB=$(printf '%s\n' "${rbw[@]}" | median); SB=$(printf '%s\n' "${sbw[@]}" | median)
printf '%-44s %10.3f Gb/s   ratio %.3f\n' "oxrdma 64 KiB RDMA READ bandwidth" "$RB" "$(echo "$RB / $T" | bc -l)"
printf '%-44s %10.3f Gb/s   ratio %.3f\n' "oxrdma 64 KiB SEND bandwidth" "$SB" "$(echo "$SB / $T" | bc -l)"
printf '%-44s %10.3f us\n' "sockperf UDP ping-pong p50 one-way, spinning" "$U"
UB=$(printf '%s\n' "${udpb[@]}" | median)
printf '%-44s %10.3f us\n' "sockperf UDP ping-pong p50 one-way, blocking" "$UB"
printf '%-44s %10.3f us     ratio %.3f (target <= 1.2), %.3f to blocking\n' "oxrdma 8 B RDMA WRITE half round trip p50" "$L" "$(echo "$L / $U" | bc -l)" "$(echo "$L / $UB" | bc -l)"
F=$(printf '%s\n' "${floor[@]}" | median)
printf '%-44s %10.3f us     ratio %.3f to sockperf\n' "raw UDP ping-pong, oxrdma's system calls" "$F" "$(echo "$F / $U" | bc -l)"
F2=$(printf '%s\n' "${floor2[@]}" | median)
printf '%-44s %10.3f us     ratio %.3f to sockperf; oxrdma WRITE is %.3f of it\n' "  the same, answering with a WRITE+ACK pair" "$F2" "$(echo "$F2 / $U" | bc -l)" "$(echo "$L / $F2" | bc -l)"
RL=$(printf '%s\n' "${rlat[@]}" | median)
printf '%-44s %10.3f us     ratio %.3f to a spinning UDP round trip\n' "oxrdma 8 B READ round trip, passive target" "$RL" "$(echo "$RL / (2 * $U)" | bc -l)"
SL=$(printf '%s\n' "${slat[@]}" | median)
printf '%-44s %10.3f us     ratio %.3f to spinning, %.3f to the floor\n' "oxrdma 8 B SEND half round trip, both poll" "$SL" "$(echo "$SL / $U" | bc -l)" "$(echo "$SL / $F" | bc -l)"
CB=$(printf '%s\n' "${cbw[@]}" | median); CL=$(printf '%s\n' "${clat[@]}" | median)
L0=$(printf '%s\n' "${lat0[@]}" | median); B2=$(printf '%s\n' "${bw2[@]}" | median)
# Median of the per-round ratios (C run / the oxrdma perf run just before it).
pairs() { local -n a=$1 b=$2; for i in "${!a[@]}"; do echo "${a[$i]} / ${b[$i]}" | bc -l; done | median; }
printf '%-44s %10.3f Gb/s\n' "oxrdma 64 KiB WRITE, two processes" "$B2"
printf '%-44s %10.3f Gb/s   ratio to it %.3f, pair by pair %.3f (target 0.95..1.05)\n' "C library: perftest ib_write_bw -s 65536" "$CB" "$(echo "$CB / $B2" | bc -l)" "$(pairs cbw bw2)"
printf '%-44s %10.3f us\n' "oxrdma 8 B WRITE, two processes, -I 0" "$L0"
printf '%-44s %10.3f us     ratio to it %.3f, pair by pair %.3f (target 0.95..1.05)\n' "C library: perftest ib_write_lat -s 8" "$CL" "$(echo "$CL / $L0" | bc -l)" "$(pairs clat lat0)"
if [ "$VETH" = 1 ]; then
  VT=$(printf '%s\n' "${vtcp[@]}" | median); VB=$(printf '%s\n' "${vbw[@]}" | median)
  printf '%-44s %10.3f Gb/s\n' "veth MTU 1500: iperf3 TCP single stream" "$VT"
  printf '%-44s %10.1f ms client, %.1f ms server\n' "  its CPU per GB moved" "$(printf '%s\n' "${vtcpc[@]}" | median)" "$(printf '%s\n' "${vtcps[@]}" | median)"
  printf '%-44s %10.3f Gb/s   ratio %.3f (target >= 1.2)\n' "veth MTU 1500: oxrdma 64 KiB WRITE" "$VB" "$(echo "$VB / $VT" | bc -l)"
  printf '%-44s %10.1f ms client, %.1f ms server\n' "  its CPU per GB moved" "$(printf '%s\n' "${vcpuc[@]}" | median)" "$(printf '%s\n' "${vcpus[@]}" | median)"
  VG=$(printf '%s\n' "${vgso[@]}" | median)
  printf '%-44s %10.3f Gb/s   ratio %.3f to TCP; oxrdma is %.3f of it\n' "veth MTU 1500: raw UDP, 1040 B x 62, GSO/GRO" "$VG" "$(echo "$VG / $VT" | bc -l)" "$(echo "$VB / $VG" | bc -l)"
fi
G=$(printf '%s\n' "${gso[@]}" | median); P=$(printf '%s\n' "${pps[@]}" | median); R=$(printf '%s\n' "${rate[@]}" | median)
printf '%-44s %10.3f Gb/s   ratio %.3f to TCP; oxrdma 64 KiB WRITE is %.3f of it\n' "raw UDP, 4128 B x 15 per send, GSO/GRO" "$G" "$(echo "$G / $T" | bc -l)" "$(echo "$B / $G" | bc -l)"
printf '%-44s %10.3f Mpps\n' "raw UDP, 64 B x 32 per sendmmsg" "$P"
printf '%-44s %10.3f Mpps   ratio %.3f (target >= 0.5)\n' "oxrdma 8 B RDMA WRITE message rate" "$R" "$(echo "$R / $P" | bc -l)"
Q1=$(printf '%s\n' "${q1[@]}" | median); Q4=$(printf '%s\n' "${q4[@]}" | median); Q64=$(printf '%s\n' "${q64[@]}" | median)
printf '%-44s %10.3f / %.3f / %.3f Gb/s   -q 64 is %.3f of -q 1 (target >= 1)\n' "oxrdma 64 KiB WRITE, -q 1 / 4 / 64" "$Q1" "$Q4" "$Q64" "$(echo "$Q64 / $Q1" | bc -l)"
