#!/usr/bin/env bash
# The Debian package, installed as a user would: builds it (packaging/deb.sh), installs it
# with dpkg, checks that rdma-core's libraries are untouched and the /dev/infiniband nodes
# are there, then runs Debian's rping and an Open MPI job over UCX through
# `oxrdma exec` on a host with nothing configured (a network namespace of its own, loopback
# alone), and removes the package. Needs root (dpkg, namespaces); under OXRDMA_CI a
# missing tool is a failure. Exits 1 on any FAIL.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
skip() {
  if [ -n "${OXRDMA_CI:-}" ]; then echo "package: FAIL: $1" >&2; exit 1; fi
  echo "package: SKIPPED ($1)"; exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root to install a package"
for t in dpkg dpkg-deb ip rping mpirun mpicc; do
  command -v $t >/dev/null || skip "$t is missing"
done
if dpkg-query -W -f='${Status}' oxrdma 2>/dev/null | grep -q ' installed'; then
  skip "a package named oxrdma is installed already; this test installs and removes its own"
fi
deb=$(bash packaging/deb.sh) || { echo "package: FAIL: packaging/deb.sh" >&2; exit 1; }
work=$(mktemp -d)
ns=oxpkg$$
fails=0
row() { printf '%-58s %s\n' "$1" "$2"; }
fail() { row "$1" "FAIL: $2"; fails=$((fails + 1)); }
cleanup() {
  dpkg -P oxrdma >/dev/null 2>&1
  ip netns del $ns 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
system=$(ldconfig -p | awk '/libibverbs.so.1 / {print $NF; exit}')
before=$( [ -n "$system" ] && sha256sum "$(readlink -f "$system")" )
if dpkg -i "$deb" >"$work/dpkg" 2>&1; then
  row "dpkg -i $(basename "$deb")" PASS
else
  fail "dpkg -i" "$(tail -3 "$work/dpkg")"
  echo "package: $fails failed"; exit 1
fi
after=$( [ -n "$system" ] && sha256sum "$(readlink -f "$system")" )
if [ -e /usr/lib/oxrdma/libibverbs.so.1 ] && [ -e /usr/lib/oxrdma/librdmacm.so.1 ] &&
   [ "$before" = "$after" ] && [ "$(ldconfig -p | awk '/libibverbs.so.1 / {print $NF; exit}')" = "$system" ]; then
  row "libraries in /usr/lib/oxrdma, rdma-core's untouched" PASS
else
  fail "libraries" "$(ls /usr/lib/oxrdma 2>&1 | xargs), system $system"
fi
# The rule as systemd applies it at boot, into a directory of its own (/dev may hold
# nodes already: those the install made, or another program's).
made=""
if command -v systemd-tmpfiles >/dev/null; then
  mkdir -p "$work/root"
  systemd-tmpfiles --create --root="$work/root" /usr/lib/tmpfiles.d/oxrdma.conf 2>/dev/null
  made=$(stat -c '%F %t:%T' "$work/root/dev/infiniband/uverbs0" "$work/root/dev/infiniband/uverbs7" 2>&1 | sort -u)
fi
if [ -c /dev/infiniband/uverbs0 ] && { [ -z "$made" ] || [ "$made" = "character special file 1:3" ]; }; then
  row "/dev/infiniband/uverbs0..7 (tmpfiles.d rule)" PASS
else
  fail "/dev/infiniband nodes" "$made; $(ls -l /dev/infiniband 2>&1 | head -2 | xargs)"
fi
loads=$(oxrdma exec -- ldd "$(command -v rping)")
if grep -q "/usr/lib/oxrdma/librdmacm.so.1" <<<"$loads" &&
   grep -q "/usr/lib/oxrdma/libibverbs.so.1" <<<"$loads"; then
  row "oxrdma exec: rping loads the package's libraries" PASS
else
  fail "oxrdma exec" "$(grep -E 'rdmacm|ibverbs' <<<"$loads" | xargs)"
fi

# A host with nothing configured: its own network namespace, loopback alone.
ip netns add $ns && ip -n $ns link set lo up
run() { ip netns exec $ns env -u OXRDMA_DEVICES -u OXRDMA_CONFIG -u LD_LIBRARY_PATH \
  XDG_CONFIG_HOME="$work" /usr/bin/oxrdma exec -- "$@"; }
port=$((24000 + $$ % 3000))
run timeout 60 rping -s -p $port -C 50 >"$work/srv" 2>&1 &
srv=$!
rc=1
for i in $(seq 20); do
  sleep 0.25
  run timeout 60 rping -c -a 127.0.0.1 -p $port -v -C 50 >"$work/cli" 2>&1 && { rc=0; break; }
done
wait $srv; src=$?
if [ $rc = 0 ] && [ $src = 0 ] && grep -q "rdma-ping-49" "$work/cli"; then
  row "rping through oxrdma exec (data checked)" PASS
else
  fail "rping through oxrdma exec" "client $rc, server $src: $(tail -2 "$work/cli" | xargs)"
fi
mpicc -O2 -Wall -Werror -o "$work/mpi_check" tests/ucx/mpi_check.c
if run timeout 180 mpirun --allow-run-as-root --oversubscribe -np 2 \
    --mca pml ucx --mca osc ucx --mca btl ^openib --mca pml_ucx_devices any \
    -x LD_LIBRARY_PATH -x UCX_TLS=rc_verbs,ud_verbs "$work/mpi_check" >"$work/mpi" 2>&1 &&
   grep -q "mpi_check: all passed" "$work/mpi"; then
  row "Open MPI over UCX through oxrdma exec" PASS
else
  fail "Open MPI over UCX through oxrdma exec" "$(grep -m1 -v '^$' "$work/mpi")"
  sed 's/^/    /' "$work/mpi" | head -10
fi
if dpkg -P oxrdma >"$work/dpkg" 2>&1 && [ ! -e /usr/lib/oxrdma/libibverbs.so.1 ] &&
   [ ! -e /usr/bin/oxrdma ]; then
  row "dpkg -P oxrdma (purged)" PASS
else
  fail "dpkg -P" "$(tail -2 "$work/dpkg")"
fi
echo "package: $fails failed"
[ $fails = 0 ]
