# Sourced by bench/wan.sh and bench/fair.sh. path_emu_up PREFIX: builds `oxrdma` ($ox),
# installs iperf3 if missing, makes a scratch directory ($work) and two network namespaces
# ($a and $b, named after PREFIX) joined by `oxrdma path-emu` with DELAY_MS, RATE, LOSS and
# QUEUE_MS, and ECN marking past ECN_MS if set (its PID in $emu, what it prints in
# $work/emu); all is undone at exit.
path_emu_up() {
  command -v iperf3 >/dev/null || { apt-get update -qq && apt-get install -y -qq iperf3 >/dev/null; }
  cargo build --release -q -p oxrdma-cli
  ox=$PWD/target/release/oxrdma
  a=$1-a-$$ b=$1-b-$$
  work=$(mktemp -d)
  emu=
  trap path_emu_down EXIT
  ip netns add "$a" && ip netns add "$b"
  "$ox" path-emu --netns "$a" "$b" --delay-ms "$DELAY_MS" --rate-mbit "$RATE" --loss "$LOSS" \
    --queue-ms "$QUEUE_MS" ${ECN_MS:+--ecn-ms "$ECN_MS"} > "$work/emu" 2>&1 &
  emu=$!
  for _ in $(seq 50); do grep -q ready "$work/emu" 2>/dev/null && break; sleep 0.1; done
  grep -q ready "$work/emu" || { cat "$work/emu"; exit 1; }
}
path_emu_down() {
  [ -n "$emu" ] && kill "$emu" 2>/dev/null && wait "$emu" 2>/dev/null
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null
  rm -rf "$work"
}
