#!/usr/bin/env bash
# RDMA WRITE goodput in the simulator under packet loss, as a ratio to a lossless run
# with the same seeds (median of RUNS seeds). Virtual time: the figures do not depend
# on how busy this machine is.
#   bash bench/sim_loss.sh            # RUNS=5 by default
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
cargo build --release -q -p oxrdma-cli
for timeout in 14 8; do
  for loss in 0.001 0.01 0.05; do
    for size in 4096 65536 1048576; do
      wrs=$(( size >= 1048576 ? 8 : 64 ))
      line=$(./target/release/oxrdma sim-bench --runs "$RUNS" --loss "$loss" --size "$size" --wrs "$wrs" --timeout "$timeout" | tail -n 1)
      echo "timeout=$timeout loss=$loss size=$size $line"
    done
  done
done
