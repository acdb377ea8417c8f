# Sourced by the bench scripts (median, and pairs below). median: the median of the
# numbers on stdin, one per line (the mean of the middle two for an even count).
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Runs each of `cases` ("name|command|baseline command") REPS times, the pair's two
# commands in turn, and prints the medians and the median of the pairs' ratios. Needs
# `work` (a scratch directory). `pairs WIDTH LABEL BASELINE_LABEL`
pairs() {
  local width=$1 c name a b x y
  printf "%-${width}s %10s %10s %8s   (%s rounds, medians; ratio: median of the pairs)\n" \
    "" "$2" "$3" ratio "$REPS"
  for c in "${cases[@]}"; do
    IFS='|' read -r name a b <<< "$c"
    : > "$work/a"; : > "$work/b"; : > "$work/r"
    for _ in $(seq "$REPS"); do
      x=$(eval "$a"); y=$(eval "$b")
      echo "$x" >> "$work/a"; echo "$y" >> "$work/b"
      awk -v x="$x" -v y="$y" 'BEGIN { if (y > 0) printf "%.3f\n", x / y }' >> "$work/r"
    done
    printf "%-${width}s %10s %10s %8s\n" "$name" "$(median < "$work/a")" \
      "$(median < "$work/b")" "$(median < "$work/r")"
  done
}
