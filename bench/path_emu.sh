# Sourced by bench/wan.sh and bench/fair.sh. path_emu_up: two network namespaces, $a and
# $b, joined by `oxrdma path-emu` ($ox) with DELAY_MS, RATE, LOSS and QUEUE_MS; its PID in
# $emu, what it prints in $work/emu. path_emu_down undoes it (the caller's EXIT trap).
path_emu_up() {
  ip netns add "$a" && ip netns add "$b"
  "$ox" path-emu --netns "$a" "$b" --delay-ms "$DELAY_MS" --rate-mbit "$RATE" --loss "$LOSS" \
    --queue-ms "$QUEUE_MS" > "$work/emu" 2>&1 &
  emu=$!
  for _ in $(seq 50); do grep -q ready "$work/emu" 2>/dev/null && break; sleep 0.1; done
  grep -q ready "$work/emu" || { cat "$work/emu"; exit 1; }
}
path_emu_down() {
  [ -n "$emu" ] && kill "$emu" 2>/dev/null && wait "$emu" 2>/dev/null
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null
  rm -rf "$work"
}
