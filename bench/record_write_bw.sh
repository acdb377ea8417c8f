# Sourced by bench/profile.sh and bench/syscalls.sh: installs perf if missing (root), builds
# `oxrdma`, makes a scratch directory `$tmp` (removed at exit, with the namespaces and the
# server below), and defines
#   record_write_bw MODE ITERS PERF_RECORD_ARGS...
# which runs a 64 KiB `oxrdma perf write-bw` stream of ITERS messages under
# `perf record PERF_RECORD_ARGS`, on loopback (one process) or, MODE veth, between two
# network namespaces joined by a veth pair with MTU 1500 (root; the server runs outside the
# recording), and leaves `$tmp/perf.data` and the client's JSON in `$tmp/run.json`.
command -v perf >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
}
cargo build --release -q -p oxrdma-cli
ox=${OX:-$PWD/target/release/oxrdma}
tmp=$(mktemp -d)
ns=(oxrec-a-$$ oxrec-b-$$)
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

record_write_bw() {
  local mode=$1 iters=$2 p
  shift 2
  local write_bw=(perf write-bw -s 65536 -n "$iters" --json --cpu-util)
  case $mode in
  loopback)
    perf record -q "$@" -o "$tmp/perf.data" -- "$ox" "${write_bw[@]}" --loopback >"$tmp/run.json"
    ;;
  veth)
    # shellcheck source=bench/veth_pair.sh
    . bench/veth_pair.sh
    veth_pair "${ns[0]}" "${ns[1]}" oxrv
    p=$((20000 + RANDOM % 9000))
    ip netns exec "${ns[1]}" "$ox" "${write_bw[@]}" -d 10.99.0.2 -p "$p" >/dev/null 2>&1 &
    spid=$!
    sleep 0.3
    perf record -q "$@" -o "$tmp/perf.data" -- \
      ip netns exec "${ns[0]}" "$ox" "${write_bw[@]}" -d 10.99.0.1 -p "$p" 10.99.0.2 >"$tmp/run.json"
    wait "$spid" || true
    spid=
    ;;
  *) echo "usage: $0 [loopback|veth]" >&2; exit 2 ;;
  esac
}
