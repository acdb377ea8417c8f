#!/usr/bin/env bash
# Programs on rdma-core's Python bindings (Debian's python3-pyverbs) on the C library, after
# `cargo build --release`: each prints PASS per case and exits 1 at its first failure.
# Without pyverbs: SKIPPED (install python3-pyverbs), or a failure under OXRDMA_CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=$PWD/target/release
py=/usr/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import pyverbs' 2>/dev/null; then
  if [ -n "${OXRDMA_CI:-}" ]; then
    echo "pyverbs: FAIL: python3-pyverbs is not installed" >&2
    exit 1
  fi
  echo "pyverbs: SKIPPED (install python3-pyverbs)"
  exit 0
fi
[ -e "$lib/libibverbs.so.1" ] || { echo "pyverbs: build first (cargo build --release)" >&2; exit 1; }
fail=0
for prog in tests/pyverbs/*.py; do
  echo "== $prog"
  if ! env OXRDMA_DEVICES=oxr0=lo LD_LIBRARY_PATH="$lib" timeout 120 "$py" "$prog"; then
    echo "pyverbs: FAIL: $prog" >&2
    fail=1
  fi
done
exit $fail
