# Sourced by tests/rdmacm/run.sh and tests/hosts/run.sh.
#
# `rping_exit_race LOG`: whether an rping run whose log is LOG ended in rping 44's exit
# race (Debian 12's rdmacm-utils): after the last event, its event thread may call
# rdma_get_cm_event on the channel the main thread has just destroyed, and the process
# exits with that error (EBADF on librdmacm, EINVAL here; fixed upstream in rdma-core
# f3ae6534a, 2025: "rping: terminate CM event thread before exiting"). A pair whose
# failing side ended so is run again, and the row says so.
rping_exit_race() {
  tail -2 "$1" | head -1 | grep -q "DISCONNECT EVENT" &&
    tail -1 "$1" | grep -q "^rdma_get_cm_event: "
}

# `rping_ok_or_race RC LOG`: true if RC is 0, or the run ended in the race (`rping_exit_race`).
rping_ok_or_race() {
  [ "$1" = 0 ] || rping_exit_race "$2"
}
