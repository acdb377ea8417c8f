//! Timers as data: each QP keeps its deadlines in a small table, and the engine keeps every
//! QP's earliest deadline in one ordered set, so finding the next timeout and the QPs that
//! are due costs O(log n) in the number of QPs, and an idle QP costs nothing per pass.

use crate::Nanos;
use std::collections::BTreeSet;

/// The timers a QP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Local ACK timeout: resend from the oldest unacknowledged PSN (spends `retry_cnt`).
    Retransmit,
    /// The end of an RNR NAK's wait.
    RnrWait,
    /// Tail-loss probe: resend from the oldest unacknowledged PSN after a short stall.
    Probe,
    /// Pacing: the next packet may leave (selective repeat on a long path).
    Pace,
}

const TIMERS: usize = 4;

/// One QP's deadlines, one slot per [`Timer`]; `NEVER` in the slot of a timer that is
/// not running (plain numbers: the earliest is a branch-free minimum, asked after every
/// packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerTable([Nanos; TIMERS]);

const NEVER: Nanos = Nanos::MAX;

impl Default for TimerTable {
    fn default() -> Self {
        TimerTable([NEVER; TIMERS])
    }
}

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Nanos) {
        self.0[timer as usize] = at;
    }
    /// Sets `timer` to `at`, or stops it when `at` is None.
    pub fn set_or_stop(&mut self, timer: Timer, at: Option<Nanos>) {
        self.0[timer as usize] = at.unwrap_or(NEVER);
    }
    pub fn stop(&mut self, timer: Timer) {
        self.0[timer as usize] = NEVER;
    }
    pub fn stop_all(&mut self) {
        self.0 = [NEVER; TIMERS];
    }
    pub fn is_running(&self, timer: Timer) -> bool {
        self.0[timer as usize] != NEVER
    }
    /// Whether `timer` runs and is due at `now`.
    pub fn is_expired(&self, timer: Timer, now: Nanos) -> bool {
        self.0[timer as usize] <= now
    }
    /// The earliest deadline of any timer.
    pub fn next(&self) -> Option<Nanos> {
        let t = self.0.iter().fold(NEVER, |a, &b| a.min(b));
        (t != NEVER).then_some(t)
    }
}

/// Every QP's earliest deadline, in deadline order.
#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    order: BTreeSet<(Nanos, u32)>,
}

impl TimerQueue {
    /// Moves `qpn` from deadline `old` to `new` (either may be None: not queued).
    pub fn requeue(&mut self, qpn: u32, old: Option<Nanos>, new: Option<Nanos>) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            self.order.remove(&(t, qpn));
        }
        if let Some(t) = new {
            self.order.insert((t, qpn));
        }
    }

    /// The earliest deadline of all.
    pub fn next(&self) -> Option<Nanos> {
        self.order.first().map(|&(t, _)| t)
    }

    /// The QPs due at `now`, earliest first.
    pub fn due(&self, now: Nanos) -> Vec<u32> {
        self.order
            .iter()
            .take_while(|&&(t, _)| t <= now)
            .map(|&(_, qpn)| qpn)
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_gives_the_earliest_running_timer() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Retransmit, 50);
        t.set(Timer::Probe, 20);
        assert_eq!(t.next(), Some(20));
        assert!(t.is_expired(Timer::Probe, 20) && !t.is_expired(Timer::Retransmit, 20));
        t.stop(Timer::Probe);
        assert_eq!(t.next(), Some(50));
        t.set_or_stop(Timer::RnrWait, Some(10));
        assert_eq!(t.next(), Some(10));
        t.stop_all();
        assert_eq!(t.next(), None);
        assert!(!t.is_running(Timer::RnrWait));
    }

    #[test]
    fn queue_orders_qps_by_deadline_and_moves_them() {
        let mut q = TimerQueue::default();
        q.requeue(7, None, Some(300));
        q.requeue(8, None, Some(100));
        q.requeue(9, None, Some(200));
        assert_eq!(q.next(), Some(100));
        assert_eq!(q.due(250), vec![8, 9]);
        q.requeue(8, Some(100), Some(400));
        assert_eq!(q.due(250), vec![9]);
        q.requeue(9, Some(200), None);
        assert_eq!((q.next(), q.len()), (Some(300), 2));
        assert_eq!(q.due(1000), vec![7, 8]);
    }
}
