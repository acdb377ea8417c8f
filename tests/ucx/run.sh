#!/usr/bin/env bash
# UCX (Debian's ucx-utils) and Open MPI over UCX on the C library, two processes on this
# host, after `cargo build --release`: every ucx_perftest case the issue lists, UCT and UCP,
# over rc_verbs and ud_verbs, the project's MPI program (tests/ucx/mpi_check.c) under
# mpirun with UCX_TLS=rc_verbs,ud_verbs and =ud_verbs, and a UCP client and server
# connected by address through UCX's rdmacm connection manager (tests/ucx/ucp_sockaddr.c). UCX lists a device only where
# /dev/infiniband/uverbs<N> exists (`oxrdma dev-nodes` makes it, as root).
# Prints a PASS/FAIL line per case; exits 1 on any FAIL. Missing tools: SKIPPED, or a
# failure under OXRDMA_CI.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
lib=$root/target/release
export LD_LIBRARY_PATH=$lib
# The loopback device alone, as with nothing configured on a host with loopback only
# (with nothing set the devices follow the interfaces; these tests talk over loopback).
unset OXRDMA_CONFIG
export OXRDMA_DEVICES=oxr0=lo
skip() {
  if [ -n "${OXRDMA_CI:-}" ]; then echo "ucx: FAIL: $1" >&2; exit 1; fi
  echo "ucx: SKIPPED ($1)"; exit 0
}
command -v ucx_perftest >/dev/null || skip "install ucx-utils"
# dev-nodes leaves nodes that exist alone; without root it fails, which is fine if they do.
"$lib/oxrdma" dev-nodes >/dev/null 2>&1 || [ -e /dev/infiniband/uverbs0 ] ||
  skip "no /dev/infiniband/uverbs0: run 'oxrdma dev-nodes' as root"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((13000 + $$ % 2000))
fails=0
row() { printf '%-44s %s\n' "$1" "$2"; }

# One ucx_perftest run: a server and a client process; both must exit 0.
perftest() {
  local name=$1 env=$2; shift 2
  port=$((port + 1))
  env $env timeout 90 ucx_perftest -p $port "$@" >"$work/srv" 2>&1 &
  local srv=$!
  local rc=1 i
  for i in $(seq 50); do
    sleep 0.2
    env $env timeout 90 ucx_perftest localhost -p $port "$@" >"$work/cli" 2>&1 && { rc=0; break; }
    grep -q "Connection refused\|failed to connect" "$work/cli" || break
  done
  wait $srv; local src=$?
  if [ $rc = 0 ] && [ $src = 0 ]; then
    row "$name" "PASS $(grep Final: "$work/cli" | awk '{print $3 " us, " $6 " MB/s"}')"
  else
    row "$name" "FAIL client $rc server $src: $(grep -m1 -i "error\|fail" "$work/cli" "$work/srv" | head -1)"
    # The ends of both logs: a crash's backtrace (UCX prints one) is gone with $work.
    tail -n 25 "$work/srv" | sed 's/^/    server: /'
    tail -n 10 "$work/cli" | sed 's/^/    client: /'
    fails=$((fails + 1))
  fi
}

uct="-d oxr0:1 -n 2000"
for t in "put_bw -s 65536 -D zcopy" "get -s 4096 -D zcopy" "am_bw -s 1024 -D bcopy" am_lat put_lat fadd cswap; do
  perftest "uct rc_verbs $t" "" -x rc_verbs $uct -t $t
done
for t in "am_bw -s 1024 -D bcopy" am_lat; do
  perftest "uct ud_verbs $t" "" -x ud_verbs $uct -t $t
done
for tls in rc_verbs,ud_verbs ud_verbs; do
  for t in tag_bw tag_lat ucp_put_bw ucp_get ucp_fadd; do
    perftest "ucp $tls $t" "UCX_TLS=$tls" -n 2000 -t $t
  done
done

# Open MPI over UCX: ping-pong, allreduce and a one-sided put, each checked by the program.
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -O2 -Wall -Werror -o "$work/mpi_check" tests/ucx/mpi_check.c || { row mpicc FAIL; fails=$((fails + 1)); }
  for tls in rc_verbs,ud_verbs ud_verbs; do
    if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca osc ucx --mca btl ^openib --mca pml_ucx_devices any \
        -x LD_LIBRARY_PATH -x UCX_TLS=$tls -x UCX_NET_DEVICES=oxr0:1 \
        "$work/mpi_check" >"$work/mpi" 2>&1 && grep -q "mpi_check: all passed" "$work/mpi"; then
      row "mpi pml ucx $tls" "PASS"
    else
      row "mpi pml ucx $tls" "FAIL: $(grep -m1 -v '^$' "$work/mpi")"
      sed 's/^/    /' "$work/mpi" | head -20
      fails=$((fails + 1))
    fi
  done
else
  [ -n "${OXRDMA_CI:-}" ] && { echo "ucx: FAIL: install openmpi-bin libopenmpi-dev" >&2; exit 1; }
  row "mpi" "SKIPPED (install openmpi-bin libopenmpi-dev)"
fi
# UCP client and server by IP address and port (tests/ucx/ucp_sockaddr.c): UCX connects
# them through its rdmacm connection manager on oxrdma's librdmacm.so.1; the capture must
# show the CM's REQ, REP and RTU, and the program checks every byte.
if [ -e /usr/include/ucp/api/ucp.h ]; then
  cc -O1 -Wall -Werror -o "$work/ucp_sockaddr" tests/ucx/ucp_sockaddr.c -lucp -lucs ||
    { row "ucp_sockaddr build" FAIL; fails=$((fails + 1)); }
  port=$((port + 1))
  UCX_TLS=rc_verbs,ud_verbs timeout 60 "$work/ucp_sockaddr" -s $port >"$work/srv" 2>&1 &
  srv=$!
  sleep 1
  UCX_TLS=rc_verbs,ud_verbs OXRDMA_PCAP="$work/ucp.pcap" timeout 60 \
    "$work/ucp_sockaddr" -c 127.0.0.1 $port >"$work/cli" 2>&1; rc=$?
  wait $srv; src=$?
  cms=$("$lib/oxrdma" decode "$work/ucp.pcap" 2>/dev/null | grep -c "CM \(REQ\|REP\|RTU\)")
  if [ $rc = 0 ] && [ $src = 0 ] && [ "$cms" -ge 3 ]; then
    row "ucp sockaddr (rdmacm CM)" "PASS ($cms CM messages)"
  else
    row "ucp sockaddr (rdmacm CM)" "FAIL client $rc server $src, $cms CM messages: $(head -2 "$work/cli")"
    fails=$((fails + 1))
  fi
else
  [ -n "${OXRDMA_CI:-}" ] && { echo "ucx: FAIL: install libucx-dev" >&2; exit 1; }
  row "ucp sockaddr" "SKIPPED (install libucx-dev)"
fi
echo "ucx: $fails failed"
[ $fails = 0 ]
