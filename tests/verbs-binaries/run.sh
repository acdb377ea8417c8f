#!/usr/bin/env bash
# Debian 12's unmodified verbs programs (ibverbs-utils, perftest) on oxrdma's
# libibverbs.so.1, with nothing set but LD_LIBRARY_PATH: each pingpong and perftest case
# runs as two processes on this host (server, then client to localhost), must exit 0 on
# both sides, and both sides must report the same byte counts. Prints a PASS/FAIL table;
# exits 1 on any FAIL.
#
#   bash tests/verbs-binaries/run.sh [filter]     (after `cargo build --release`)
#
# OXRDMA_LIB_DIR names the directory holding libibverbs.so.1 (default target/release).
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=${OXRDMA_LIB_DIR:-$PWD/target/release}
filter=${1:-}
if [ ! -e "$lib/libibverbs.so.1" ]; then
  echo "no $lib/libibverbs.so.1: run cargo build --release first" >&2
  exit 1
fi
for t in ibv_devices ibv_rc_pingpong ib_write_bw; do
  command -v $t >/dev/null || { echo "$t is missing: apt-get install ibverbs-utils perftest" >&2; exit 1; }
done
export LD_LIBRARY_PATH=$lib
# The loopback device alone, as with nothing configured on a host with loopback only
# (with nothing set the devices follow the interfaces; these tests talk over loopback).
unset OXRDMA_CONFIG
export OXRDMA_DEVICES=oxr0=lo
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Listening ports below the kernel's ephemeral range, so that no client's local port of an
# earlier case (or of anything else on the host) already holds the one a server wants.
eph_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
port=$((10000 + RANDOM % (eph_low - 10100)))
pass=0; fail=0; results=()

report() { # name ok detail
  if [ "$2" = 1 ]; then pass=$((pass + 1)); results+=("PASS  $1"); else fail=$((fail + 1)); results+=("FAIL  $1  ($3)"); fi
}

# The "#bytes #iterations" rows of a perftest table, or the "N bytes in" of a pingpong.
counts() { awk '/^ *[0-9]+ +[0-9]+ /{print $1, $2} / bytes in /{print $1}' "$1" | sort; }

# The first line of a program's output that says what went wrong.
why() { grep -iE 'fail|error|couldn|unable|did not' "$1" | head -1 | tr -s ' \t' ' '; }

# pair NAME TOOL ARGS...: server and client of one case.
pair() {
  local name=$1; shift
  [ -n "$filter" ] && [[ "$name" != *$filter* ]] && return
  port=$((port + 1))
  local s=$out/s.$port c=$out/c.$port
  timeout 300 "$@" -p $port >"$s" 2>&1 &
  local spid=$!
  local crc=1
  for _ in $(seq 50); do
    sleep 0.1
    timeout 300 "$@" -p $port localhost >"$c" 2>&1
    crc=$?
    grep -qE "Couldn't connect|Unable to open file descriptor for socket connection" "$c" || break
    kill -0 $spid 2>/dev/null || break # the server is gone: retrying cannot help
  done
  wait $spid; local src=$?
  local sc cc
  sc=$(counts "$s"); cc=$(counts "$c")
  if [ $src -ne 0 ] || [ $crc -ne 0 ]; then
    report "$name" 0 "exit server $src client $crc; server: $(why "$s"); client: $(why "$c")"
  elif [ -z "$cc$sc" ]; then
    report "$name" 0 "no results printed"
  elif [ -n "$sc" ] && [ -n "$cc" ] && [ -n "$(comm -23 <(echo "$sc") <(echo "$cc"))" ]; then
    # Every row the server prints must be the client's too (a write or read bandwidth
    # server prints only the last size).
    report "$name" 0 "byte counts differ: server [$(echo $sc)] client [$(echo $cc)]"
  else
    report "$name" 1
  fi
}

# single NAME TOOL ARGS...: one process that must succeed.
single() {
  local name=$1; shift
  [ -n "$filter" ] && [[ "$name" != *$filter* ]] && return
  if "$@" >"$out/single" 2>&1; then report "$name" 1; else report "$name" 0 "exit $?"; fi
}

single "ibv_devices" ibv_devices
single "ibv_devinfo -v" ibv_devinfo -v
pair "ibv_rc_pingpong" ibv_rc_pingpong -g 0
pair "ibv_rc_pingpong -e" ibv_rc_pingpong -g 0 -e
pair "ibv_rc_pingpong -N" ibv_rc_pingpong -g 0 -N
pair "ibv_uc_pingpong" ibv_uc_pingpong -g 0
pair "ibv_ud_pingpong" ibv_ud_pingpong -g 0
pair "ibv_srq_pingpong" ibv_srq_pingpong -g 0
# No XRC: the server must fail at once, cleanly (an error message, no signal).
if [ -z "$filter" ] || [[ "ibv_xsrq_pingpong" == *$filter* ]]; then
  timeout 30 ibv_xsrq_pingpong -g 0 -p $((port + 999)) >"$out/x" 2>&1; rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ -s "$out/x" ]; then report "ibv_xsrq_pingpong fails cleanly (no XRC)" 1
  else report "ibv_xsrq_pingpong fails cleanly (no XRC)" 0 "exit $rc: $(head -c 200 "$out/x")"; fi
fi

# perftest: every test, each connection type it offers, all sizes; bandwidth also -q 4.
for test in write read send atomic; do
  case $test in
    write) types="RC UC" ;;
    send) types="RC UC UD" ;;
    *) types="RC" ;;
  esac
  # Atomics have one size (8 B): perftest refuses -a for them.
  all=-a; [ $test = atomic ] && all=
  for c in $types; do
    # UC has no flow control: a sender that outruns its receiver loses messages (here, in
    # the receiver's socket buffer, 32 MiB), and perftest's send server then waits 120 s
    # for them and fails. 100 messages of 8 MiB outrun it on a loaded host; 5 fit.
    n=100; [ $test$c = sendUC ] && n=5
    pair "ib_${test}_bw -c $c $all -n $n" ib_${test}_bw -c $c $all -n $n
    pair "ib_${test}_lat -c $c $all" ib_${test}_lat -c $c $all -n 100
  done
  pair "ib_${test}_bw -q 4" ib_${test}_bw -q 4 -n 1000
done
# Event mode (-e): each side sleeps on its completion channel, takes the event, re-arms the
# CQ and polls once (perftest has no -e for WRITE). The latency tests failed every time
# while an armed CQ reported the completion it already held.
for test in send read atomic; do
  if [ $test = atomic ]; then
    pair "ib_${test}_lat -e" ib_${test}_lat -e -n 200
  else
    pair "ib_${test}_lat -e -a" ib_${test}_lat -e -a -n 200
  fi
  pair "ib_${test}_bw -e" ib_${test}_bw -e -n 1000
done

# Secure QPs from a pre-shared key (OXRDMA_SECURE_KEY on both sides): a bandwidth server
# leaves its QP in RTR, where it has no send key yet, and must still answer (its ACKs and
# READ and atomic responses go under its reply key). Every bandwidth test failed before,
# the client's WRs ending in RETRY_EXC; the latency tests, whose QPs reach RTS, passed.
key=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
for test in write read send atomic; do
  pair "ib_${test}_bw, OXRDMA_SECURE_KEY" env OXRDMA_SECURE_KEY=$key ib_${test}_bw -n 1000
done
pair "ib_write_bw, OXRDMA_SECURE_KEY, AES-256-GCM" \
  env OXRDMA_SECURE_KEY=$key OXRDMA_SECURE_SUITE=aes-256-gcm ib_write_bw -n 1000
pair "ib_read_lat, OXRDMA_SECURE_KEY" env OXRDMA_SECURE_KEY=$key ib_read_lat -n 200

printf '%s\n' "${results[@]}"
echo "verbs binaries: $pass passed, $fail failed"
[ $fail -eq 0 ]
