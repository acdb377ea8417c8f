#!/usr/bin/env bash
# Checks that a change left the wire alone: runs fixed simulator workloads (loss,
# reordering, duplication, corruption, RNR) with this tree's oxrdma and with REV's, with
# every delivered packet traced (virtual time, direction, opcode, QPN, PSN, flags, length,
# AETH), and compares the traces byte for byte.
#   bash bench/same_wire.sh [REV]     # REV defaults to HEAD~1
# REV is built in a temporary git worktree with its own target directory (minutes, the
# first time); nothing else is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD~1}
work=${TMPDIR:-/tmp}/oxrdma-same-wire
git worktree remove --force "$work/tree" 2>/dev/null || true
mkdir -p "$work"
git worktree add --detach "$work/tree" "$rev" >/dev/null
trap 'git worktree remove --force "$work/tree" 2>/dev/null || true' EXIT
(cd "$work/tree" && CARGO_TARGET_DIR="$work/target" cargo build --release -q -p oxrdma-cli)
cargo build --release -q -p oxrdma-cli
old=$work/target/release/oxrdma new=./target/release/oxrdma
status=0
while read -r args; do
  # Packets delivered (a trace also lists those the network lost, since 2026-11-28).
  OXRDMA_SIM_TRACE=1 "$old" sim $args 2>&1 | grep -v '^ *[0-9]* [0-9]*->[0-9]* lost ' > "$work/old.trace" || true
  OXRDMA_SIM_TRACE=1 "$new" sim $args 2>&1 | grep -v '^ *[0-9]* [0-9]*->[0-9]* lost ' > "$work/new.trace" || true
  if cmp -s "$work/old.trace" "$work/new.trace"; then
    echo "same   $(wc -l < "$work/new.trace") trace lines  sim $args"
  else
    echo "DIFFER sim $args"; diff "$work/old.trace" "$work/new.trace" | head -5 || true; status=1
  fi
done <<'LIST'
--seed 7 --qps 4 --wrs 40 --loss 0.02 --reorder 0.05
--seed 11 --qps 3 --wrs 30 --late-recv
--seed 3 --qps 2 --wrs 50 --duplicate 0.03 --corrupt 0.01
--seed 5 --nodes 3 --qps 6 --wrs 20 --max-len 65536
LIST
exit $status
