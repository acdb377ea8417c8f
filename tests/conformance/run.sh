#!/usr/bin/env bash
# The verbs conformance suite (tests/conformance/*.c) on the C library, after
# `cargo build --release`: compiled against Debian's verbs.h, run with every topology
# (two QPs of one context, two contexts of one device, two processes), transport and API,
# polling and then sleeping on completion channels (-e).
# Prints one line per case and a total; exits 1 on any FAIL. Without verbs.h: SKIPPED
# (install libibverbs-dev), or a failure under OXRDMA_CI.
# The same binary runs on Linux rxe in the interop guest (tests/interop/run.sh, the
# `conformance` row), where tests/conformance/rxe-known.txt lists the cases rdma-core 44's
# rxe provider gets wrong.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -e /usr/include/infiniband/verbs.h ]; then
  [ -n "${OXRDMA_CI:-}" ] && { echo "conformance: FAIL: install libibverbs-dev" >&2; exit 1; }
  echo "conformance: SKIPPED (install libibverbs-dev)"
  exit 0
fi
out=${CONFORMANCE_BIN:-$PWD/target/release/conformance}
cc -O2 -Wall -Wextra -Werror -o "$out" tests/conformance/*.c -libverbs
[ -n "${CONFORMANCE_BUILD_ONLY:-}" ] && exit 0
# Twice: polling, then with every end sleeping on its completion channel (-e).
env OXRDMA_DEVICES=oxr0=lo LD_LIBRARY_PATH="$PWD/target/release" timeout 900 "$out" "$@"
env OXRDMA_DEVICES=oxr0=lo LD_LIBRARY_PATH="$PWD/target/release" timeout 900 "$out" -e "$@"
