#!/usr/bin/env bash
# RDMA between hosts as it is deployed, with nothing configured: two hosts (network
# namespaces joined by a veth pair, each with an IPv4 and an IPv6 address) running
# Debian's unmodified programs on oxrdma's libibverbs.so.1 and librdmacm.so.1 with only
# LD_LIBRARY_PATH set. The devices follow each host's interfaces (a device per interface,
# its addresses as GIDs in rxe's order), and several processes share a host's address.
# Needs root (namespaces) and `cargo build --release`. Prints a PASS/FAIL line per case;
# exits 1 on any FAIL. Missing tools: SKIPPED, or a failure under OXRDMA_CI.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
# shellcheck source=tests/rdmacm/rping_race.sh
. tests/rdmacm/rping_race.sh
lib=$root/target/release
skip() {
  if [ -n "${OXRDMA_CI:-}" ]; then echo "hosts: FAIL: $1" >&2; exit 1; fi
  echo "hosts: SKIPPED ($1)"; exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "install iproute2"
[ -e "$lib/librdmacm.so.1" ] || skip "build first: cargo build --release"
for t in ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ib_write_bw ib_send_lat rping rstream udaddy \
  ucx_perftest fi_pingpong iperf3 mpirun mpicc; do
  command -v $t >/dev/null || skip "$t is missing (.ci/run installs it)"
done
preload=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
[ -n "$preload" ] || skip "librspreload.so (librdmacm1) not found"

work=$(mktemp -d)
tag=oxh$$
A=${tag}a B=${tag}b
A4=10.93.0.1 B4=10.93.0.2 A6=fd93::1 B6=fd93::2
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
ip netns add $A && ip netns add $B || skip "cannot create network namespaces"
ip link add ${tag}x netns $A type veth peer name ${tag}y netns $B
for h in "$A ${tag}x $A4 $A6" "$B ${tag}y $B4 $B6"; do
  set -- $h
  ip -n $1 addr add $3/24 dev $2
  ip -n $1 addr add $4/64 dev $2 nodad
  # The link-local address (GID 0) usable at once too.
  ip netns exec $1 sh -c "echo 0 > /proc/sys/net/ipv6/conf/$2/accept_dad"
  ip -n $1 link set lo up
  ip -n $1 link set $2 up
done
IFA=${tag}x IFB=${tag}y
# Nothing configured: no OXRDMA_DEVICES, no OXRDMA_CONFIG, no user devices file.
mkdir -p "$work/xdg"
on() { local ns=$1; shift; ip netns exec $ns env -u OXRDMA_DEVICES -u OXRDMA_CONFIG \
  XDG_CONFIG_HOME="$work/xdg" LD_LIBRARY_PATH="$lib" "$@"; }
# A fresh link needs a moment before it carries IPv6 (neighbour discovery).
sleep 2
"$lib/oxrdma" dev-nodes >/dev/null 2>&1 || true

port=$((21000 + $$ % 5000))
fails=0
row() { printf '%-58s %s\n' "$1" "$2"; }
fail() { row "$1" "FAIL: $2"; fails=$((fails + 1)); }
# ONLY=REGEX runs the cases whose names match it.
wanted() { [[ $1 =~ ${ONLY:-.} ]]; }

# The device list and GID table: a device per interface with its addresses in rxe's order
# (default link-local GID from the MAC address, IPv4, IPv6); no loopback device.
mac=$(ip -n $A -br link show $IFA | awk '{print $3}')
ll=$(python3 -c "
m=[int(x,16) for x in '$mac'.split(':')]; m[0]^=2
b=m[:3]+[0xff,0xfe]+m[3:]
import ipaddress; print(ipaddress.IPv6Address(bytes([0xfe,0x80]+[0]*6+b)))")
want="$ll ::ffff:$A4 $A6"
got=$(on $A ibv_devinfo -d oxr_$IFA -v 2>&1 | awk '/GID\[/ {print $3}' | tr -d ',' | xargs)
names=$(on $A ibv_devices 2>&1 | awk 'NR > 2 {print $1}' | xargs)
if [ "$got" = "$want" ] && [ "$names" = "oxr_$IFA" ]; then
  row "devices: oxr_$IFA (GIDs $want)" PASS
else
  fail "devices and GID table" "devices '$names', GIDs '$got', want '$want'"
fi
tool=$(on $A "$lib/oxrdma" devinfo 2>&1)
if grep -q "interface:.$IFA (index" <<< "$tool" && grep -q "GID\[  1\]:.::ffff:$A4" <<< "$tool"; then
  row "oxrdma devinfo: interface and GID indexes" PASS
else
  fail "oxrdma devinfo" "$(head -5 <<< "$tool")"
fi

# One server (host A) and client (host B) pair; the client is retried while the server is
# not listening yet. Both must exit 0, and the client's output must hold CHECK if given.
# A run that ends in rping 44's exit race is made again, at most twice (rping_race.sh).
pair() {
  local name=$1 server=$2 client=$3 check=${4:-}
  wanted "$name" || return 0
  local note
  rping_runs pair_once "$server" "$client"
  if [ $rc -eq 0 ] && [ $src -eq 0 ] && { [ -z "$check" ] || grep -q "$check" "$work/cli"; }; then
    row "$name" "PASS${note:+ ($note)}"
  else
    fail "$name" "client $rc, server $src${note:+ ($note)}"
    sed 's/^/    client: /' "$work/cli" | tail -4
    sed 's/^/    server: /' "$work/srv" | tail -4
  fi
}
# One run of a pair: sets rc (client) and src (server).
pair_once() {
  local server=$1 client=$2 i
  on $A timeout 120 bash -c "$server" >"$work/srv" 2>&1 &
  local srv=$!
  rc=1
  for i in $(seq 40); do
    sleep 0.25
    # Line-buffered: a client that crashes after its error (perftest's -R client does,
    # on a REJECTED from a server not listening yet) still leaves the line to retry on.
    on $B timeout 120 stdbuf -oL -eL bash -c "$client" >"$work/cli" 2>&1 && { rc=0; break; }
    grep -qi "REJECTED\|rejected\|error 8\|refused\|Couldn't connect\|Unable to connect" \
      "$work/cli" || break
  done
  wait $srv
  src=$?
}
next() { port=$((port + 1)); }

# Verbs programs: the first device, each GID index (0 link-local, 1 IPv4, 2 IPv6).
for g in 0 1 2; do
  next; pair "ibv_rc_pingpong -g $g (first device, nothing set)" \
    "ibv_rc_pingpong -g $g -p $port -n 500" "ibv_rc_pingpong -g $g -p $port -n 500 $A4" "iters"
done
next; pair "ibv_ud_pingpong -g 1" \
  "ibv_ud_pingpong -g 1 -p $port -n 500" "ibv_ud_pingpong -g 1 -p $port -n 500 $A4" "iters"
next; pair "ib_write_bw (perftest picks GID 1)" \
  "ib_write_bw -p $port -D 1" "ib_write_bw -p $port -D 1 $A4" "65536"
next; pair "ib_write_bw -x 2 (IPv6 GID)" \
  "ib_write_bw -x 2 -p $port -D 1" "ib_write_bw -x 2 -p $port -D 1 $A4" "65536"
next; pair "ib_send_lat" "ib_send_lat -p $port -n 1000" "ib_send_lat -p $port -n 1000 $A4" "t_typical"
# Through the RDMA CM: the device and source address by route.
next; pair "ib_write_bw -R" "ib_write_bw -R -p $port -D 1" "ib_write_bw -R -p $port -D 1 $A4" "65536"
next; pair "ib_send_lat -R" "ib_send_lat -R -p $port -n 1000" \
  "ib_send_lat -R -p $port -n 1000 $A4" "t_typical"
next; pair "rping IPv4 (data checked)" "rping -s -p $port -C 50" \
  "rping -c -a $A4 -p $port -v -C 50" "rdma-ping-49"
next; pair "rping IPv6 (data checked)" "rping -s -a $A6 -p $port -C 50" \
  "rping -c -a $A6 -p $port -v -C 50" "rdma-ping-49"
# udaddy's server answers each datagram through an address handle made from its receive
# (ibv_create_ah_from_wc: the GID it came to is the reply's source).
pair "udaddy (UD through SIDR, replies by the receive's AH)" "udaddy" "udaddy -s $A4" \
  "test complete"
next; pair "rstream" "rstream -p $port -S 65536 -C 200" "rstream -s $A4 -p $port -S 65536 -C 200" \
  "Gb/sec"
next; pair "ucx_perftest tag_lat over rc_verbs,ud_verbs" \
  "UCX_TLS=rc_verbs,ud_verbs ucx_perftest -p $port -t tag_lat -n 2000" \
  "UCX_TLS=rc_verbs,ud_verbs ucx_perftest $A4 -p $port -t tag_lat -n 2000" "Final:"
for e in msg rdm; do
  next; pair "fi_pingpong -p verbs -e $e (data checked)" \
    "fi_pingpong -p verbs -e $e -c -I 200 -B $port" \
    "fi_pingpong -p verbs -e $e -c -I 200 -P $port $A4" "1m\\|4k"
done
next; pair "iperf3 over rsockets" \
  "LD_PRELOAD=$preload iperf3 -s -1 -p $port" \
  "LD_PRELOAD=$preload iperf3 -c $A4 -p $port -t 2" "receiver"

# Many processes on each host's one address at once.
many() {
  local name=$1 n=$2 server=$3 client=$4 check=$5 i pids=() rc=0
  wanted "$name" || return 0
  for i in $(seq $n); do
    on $A timeout 120 bash -c "${server//PORT/$((port + i))}" >"$work/s$i" 2>&1 &
    pids+=($!)
  done
  sleep 1
  local cpids=()
  for i in $(seq $n); do
    on $B timeout 120 bash -c "${client//PORT/$((port + i))}" >"$work/c$i" 2>&1 &
    cpids+=($!)
  done
  for p in "${cpids[@]}" "${pids[@]}"; do wait $p || rc=$((rc + 1)); done
  local ok=0
  for i in $(seq $n); do grep -q "$check" "$work/c$i" && ok=$((ok + 1)); done
  port=$((port + n + 1))
  if [ $rc = 0 ] && [ $ok = $n ]; then
    row "$name" PASS
  else
    fail "$name" "$rc processes failed, $ok of $n clients checked"
    for i in $(seq $n); do grep -q "$check" "$work/c$i" || tail -3 "$work/c$i" "$work/s$i"; done | head -20
  fi
}
many "8 rping pairs at once (one address per host)" 8 \
  "rping -s -p PORT -C 100" "rping -c -a $A4 -p PORT -v -C 100" "rdma-ping-99"
many "ib_write_bw, two processes on each host" 2 \
  "ib_write_bw -p PORT -D 2" "ib_write_bw -p PORT -D 2 $A4" "65536"
many "ibv_rc_pingpong, 4 pairs at once" 4 \
  "ibv_rc_pingpong -g 1 -p PORT -n 2000" "ibv_rc_pingpong -g 1 -p PORT -n 2000 $A4" "iters"

# Open MPI across the two hosts, two ranks on each: mpirun on host A starts host B's ranks
# through an agent that enters B's namespace. UCX (rc_verbs, ud_verbs) and libfabric's
# verbs provider; the program checks an allreduce, a ping-pong up to 1 MiB and a put.
mpicc -O2 -Wall -Werror -o "$work/mpi_check" tests/ucx/mpi_check.c || fail mpicc "does not build"
cat >"$work/agent" <<EOF
#!/bin/sh
# mpirun's rsh agent: "agent HOST COMMAND..." runs COMMAND on HOST (its namespace).
host=\$1; shift
case \$host in $B4) ns=$B ;; *) ns=$A ;; esac
exec ip netns exec \$ns env -u OXRDMA_DEVICES OXRDMA_DEBUG_GROUP=1 LD_LIBRARY_PATH="$lib" XDG_CONFIG_HOME="$work/xdg" sh -c "\$*"
EOF
chmod +x "$work/agent"
mpi() {
  local name=$1; shift
  wanted "$name" || return 0
  if on $A timeout 180 mpirun --allow-run-as-root --oversubscribe \
      --mca plm_rsh_agent "$work/agent" --host $A4:2,$B4:2 -np 4 \
      --mca btl ^openib --mca oob_tcp_if_include 10.93.0.0/24 -x LD_LIBRARY_PATH "$@" \
      "$work/mpi_check" >"$work/mpi" 2>&1 && grep -q "mpi_check: all passed" "$work/mpi"; then
    row "$name" PASS
  else
    fail "$name" "$(grep -m1 -v '^$' "$work/mpi")"
    { grep "oxrdma group" "$work/mpi" | head -5; sed 's/^/    /' "$work/mpi" | head -15; }
  fi
}
mpi "Open MPI, 2 hosts x 2 ranks, pml ucx (rc_verbs,ud_verbs)" \
  --mca pml ucx --mca osc ucx --mca pml_ucx_devices any -x UCX_TLS=rc_verbs,ud_verbs
mpi "Open MPI, 2 hosts x 2 ranks, mtl ofi (verbs;ofi_rxm)" \
  --mca pml cm --mca mtl ofi --mca osc pt2pt -x FI_PROVIDER="verbs;ofi_rxm"

# Errors, never hangs: a destination no route reaches fails at once.
start=$(date +%s%N)
on $B timeout 20 rping -c -a 10.94.0.9 -C 1 >"$work/cli" 2>&1
took=$((($(date +%s%N) - start) / 1000000))
if grep -qi "addr\|unreach\|error" "$work/cli" && [ $took -lt 5000 ]; then
  row "rping to an unroutable address: error in ${took} ms" PASS
else
  fail "rping to an unroutable address" "${took} ms: $(head -2 "$work/cli")"
fi

echo "hosts: $fails failed"
[ $fails = 0 ]
