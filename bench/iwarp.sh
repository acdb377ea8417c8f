#!/usr/bin/env bash
# iWARP against TCP on loopback, in the same run (issue 60's performance figures): 64 KiB
# RDMA WRITE goodput over iWARP (`oxrdma iwarp-perf write-bw`) against iperf3 with 64 KiB
# writes, and the 8 B WRITE ping-pong's half round trip against a TCP ping-pong of 8 B
# messages with both ends spinning on non-blocking sockets, as iwarp-perf's ends do
# (`iwarp-perf write-lat`; the TCP one is a small C program built here). Rounds alternate;
# medians and the median of the pairs' ratios.
#
#   bash bench/iwarp.sh            # REPS=5 rounds; needs iperf3, gcc and a release build
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/median.sh
REPS=${REPS:-5}
OX=${OXRDMA_BIN:-target/release/oxrdma}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port() { echo $((20000 + RANDOM % 20000)); }

# The TCP ping-pong: 8 B each way, both ends spinning on non-blocking sockets.
cat > "$work/pp.c" <<'C'
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
static void xfer(int fd, char *b, int out) {
  int n = 0;
  while (n < 8) {
    int r = out ? send(fd, b + n, 8 - n, 0) : recv(fd, b + n, 8 - n, 0);
    if (r > 0) n += r; else if (r == 0) exit(1);
  }
}
int main(int argc, char **argv) {
  int port = atoi(argv[1]), iters = atoi(argv[2]), server = argc > 3, one = 1, fd;
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (server) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1)) return 1;
    fd = accept(l, 0, 0);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    while (connect(fd, (void *)&a, sizeof a)) { usleep(10000); close(fd); fd = socket(AF_INET, SOCK_STREAM, 0); }
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  char b[8] = {0};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < iters; i++) {
    if (server) { xfer(fd, b, 0); xfer(fd, b, 1); } else { xfer(fd, b, 1); xfer(fd, b, 0); }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3;
  if (!server) printf("%.3f\n", us / (2.0 * iters));
  return 0;
}
C
gcc -O2 -o "$work/pp" "$work/pp.c"

# MB/s (10^6 bytes a second) of each.
iwarp_bw() {
  local p; p=$(port)
  "$OX" iwarp-perf write-bw --bind 127.0.0.1 -p "$p" -n 40000 >/dev/null 2>&1 &
  local s=$!
  local out=""
  for _ in $(seq 50); do
    out=$("$OX" iwarp-perf write-bw 127.0.0.1 -p "$p" -n 40000 --json 2>/dev/null) && break
    sleep 0.05
  done
  wait "$s" || true
  echo "$out" | awk -F'"gbps":' '{split($2, a, ","); printf "%.1f\n", a[1] * 1000 / 8}'
}
tcp_bw() {
  local p; p=$(port)
  iperf3 -s -1 -B 127.0.0.1 -p "$p" >/dev/null 2>&1 &
  local s=$!
  sleep 0.3
  iperf3 -c 127.0.0.1 -p "$p" -l 64K -n 2560M -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))'
  wait "$s" || true
}
# Half round trips, us.
iwarp_lat() {
  local p; p=$(port)
  "$OX" iwarp-perf write-lat --bind 127.0.0.1 -p "$p" -n 50000 >/dev/null 2>&1 &
  local s=$!
  local out=""
  for _ in $(seq 50); do
    out=$("$OX" iwarp-perf write-lat 127.0.0.1 -p "$p" -n 50000 --json 2>/dev/null) && break
    sleep 0.05
  done
  wait "$s" || true
  echo "$out" | awk -F'"half_rtt_us":' '{split($2, a, "[,}]"); printf "%.3f\n", a[1]}'
}
tcp_lat() {
  local p; p=$(port)
  "$work/pp" "$p" 50000 server &
  local s=$!
  "$work/pp" "$p" 50000
  wait "$s" || true
}

cases=(
  "64 KiB WRITE goodput, MB/s (iWARP / iperf3 64 KiB writes)|iwarp_bw|tcp_bw"
  "8 B half round trip, us (iWARP WRITE / TCP ping-pong)|iwarp_lat|tcp_lat"
)
pairs 58 oxrdma TCP
