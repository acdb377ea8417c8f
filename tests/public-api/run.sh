#!/usr/bin/env bash
# The public API of each library crate against its snapshot (tests/public-api/<crate>.txt),
# listed by cargo-public-api from rustdoc's JSON (a nightly toolchain): an item added,
# removed or changed fails here until the snapshot is updated in the same commit, so no
# break of the API lands unnoticed. There is no released version yet for
# cargo-semver-checks to compare with; the snapshot is the baseline.
#   bash tests/public-api/run.sh            check
#   bash tests/public-api/run.sh --bless    write the snapshots from the tree
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=tests/public-api
# The API crate with all its features, and the crates it re-exports or drivers build on.
CRATES=(oxrdma oxrdma-core oxrdma-wire oxrdma-udp oxrdma-tcp oxrdma-sim oxrdma-verbs-abi)
TOOL_VERSION=0.52.0

if ! cargo public-api --version 2>/dev/null | grep -qF "$TOOL_VERSION"; then
  echo "installing cargo-public-api $TOOL_VERSION (about 4 minutes)"
  cargo install --locked --quiet cargo-public-api --version "$TOOL_VERSION"
fi
cargo +nightly --version > /dev/null 2>&1 || { echo "public-api: needs a nightly toolchain" >&2; exit 1; }

api() {  # api CRATE: its public API, one item a line, without auto-trait and blanket impls
  local feat=()
  [ "$1" = oxrdma ] && feat=(--all-features)
  cargo public-api --simplified --simplified -p "$1" "${feat[@]}" 2> "$tmp/$1.err" \
    || { cat "$tmp/$1.err" >&2; return 1; }
}

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
for c in "${CRATES[@]}"; do
  api "$c" > "$tmp/$c.txt"
  [ -s "$tmp/$c.txt" ] || { echo "public-api: $c: empty listing" >&2; exit 1; }
  if [ "${1:-}" = --bless ]; then
    cp "$tmp/$c.txt" "$HERE/$c.txt"; echo "$c: $(wc -l < "$HERE/$c.txt") items written"
    continue
  fi
  # The comparison must see a change: the snapshot without its first item differs.
  if sed 1d "$HERE/$c.txt" | diff -q - "$tmp/$c.txt" > /dev/null; then
    echo "public-api: $c: the check cannot see a removed item" >&2; exit 1
  fi
  if diff -u "$HERE/$c.txt" "$tmp/$c.txt" > "$tmp/$c.diff"; then
    echo "$c: public API as in $HERE/$c.txt ($(wc -l < "$tmp/$c.txt") items)"
  else
    echo "$c: public API differs from $HERE/$c.txt (- removed, + added):"
    grep '^[-+][^-+]' "$tmp/$c.diff" | head -60
    fails=$((fails + 1))
  fi
done
if [ "$fails" -gt 0 ]; then
  echo "public-api: $fails crate(s) changed; if intended, run: bash $HERE/run.sh --bless" >&2
  exit 1
fi
