#!/usr/bin/env bash
# Compares a conformance run on Linux rxe with what rxe is known to get wrong:
#   bash tests/conformance/compare.sh RXE_LOG [KNOWN] [RUNS]
# Every FAIL in RXE_LOG must match a glob of KNOWN (default rxe-known.txt beside this
# script), every glob must match a FAIL (else the list is stale), and RUNS runs (default 1)
# must have finished in the log. Prints a one-line
# summary; exits 1 on a mismatch, listing it.
set -euo pipefail
log=$1
known=${2:-$(dirname "$0")/rxe-known.txt}
runs=${3:-1}
mapfile -t globs < <(sed 's/#.*//; s/[[:space:]]*$//; /^$/d' "$known")
mapfile -t fails < <(sed -n 's/^FAIL \([^:]*\):.*/\1/p' "$log")
total=$(grep -c '^\(PASS\|FAIL\) ' "$log" || true)
bad=0
declare -A used=()
for f in "${fails[@]}"; do
  hit=""
  for g in "${globs[@]}"; do
    # shellcheck disable=SC2053 # the glob is meant to match
    if [[ $f == $g ]]; then hit=$g; used[$g]=1; fi
  done
  if [ -z "$hit" ]; then
    echo "rxe fails a case the list does not name: $(grep -m1 "^FAIL $f:" "$log")"
    bad=1
  fi
done
for g in "${globs[@]}"; do
  if [ -z "${used[$g]:-}" ]; then
    echo "rxe-known.txt names a case rxe passes now: $g"
    bad=1
  fi
done
finished=$(grep -c '^conformance: ' "$log" || true)
[ "$finished" -ge "$runs" ] || { echo "$finished of $runs runs finished"; bad=1; }
echo "rxe: $total cases, ${#fails[@]} failed, all named in rxe-known.txt: $([ $bad = 0 ] && echo yes || echo no)"
exit $bad
