# Sourced by tests/rdmacm/run.sh and tests/hosts/run.sh.
#
# `rping_exit_race LOG`: whether an rping run whose log is LOG ended in rping 44's exit
# race (Debian 12's rdmacm-utils): after the last event, its event thread may call
# rdma_get_cm_event on the channel the main thread has just destroyed, and the process
# exits with that error (EBADF on librdmacm, EINVAL here; fixed upstream in rdma-core
# f3ae6534a, 2025: "rping: terminate CM event thread before exiting"). A pair whose
# failing side ended so is run again (`rping_runs`), and the row says so.
rping_exit_race() {
  tail -2 "$1" | head -1 | grep -q "DISCONNECT EVENT" &&
    tail -1 "$1" | grep -q "^rdma_get_cm_event: "
}

# `rping_ok_or_race RC LOG`: true if RC is 0, or the run ended in the race (`rping_exit_race`).
rping_ok_or_race() {
  [ "$1" = 0 ] || rping_exit_race "$2"
}

# `rping_runs CMD...`: runs CMD (one run of a pair: it sets rc and src, and logs to
# $work/cli and $work/srv), again at most twice while the failing sides ended in the race;
# sets `note` to say which runs did (empty if none).
rping_runs() {
  local attempt
  note=""
  for attempt in 1 2 3; do
    "$@"
    if [ "$rc$src" != 00 ] && [ $attempt -lt 3 ] && rping_ok_or_race $rc "$work/cli" &&
      rping_ok_or_race $src "$work/srv"; then
      note="${note:+$note, }run $attempt ended in rping's exit race"
      continue
    fi
    break
  done
}
