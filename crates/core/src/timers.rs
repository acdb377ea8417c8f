//! Timers as data: each QP keeps its deadlines in a small table, and the engine keeps every
//! QP's earliest deadline in one queue (a short list, or an ordered set once more than a few
//! QPs have one), so finding the next timeout and the QPs that are due costs O(log n) in
//! the number of QPs at worst, and an idle QP costs nothing per pass.

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

/// Every QP's earliest deadline, in deadline order: a short unsorted list while few QPs
/// have one, an ordered set beyond. A deadline moves at nearly every packet, and a set's
/// removal and insertion cost a ping-pong's QP 660 instructions a round trip's half, a tenth
/// of the engine's work; the list's are a few. Either way `next` and `due` answer the same.
#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    /// Every entry while `many` is empty (at most `FEW`).
    few: Vec<(Nanos, u32)>,
    many: BTreeSet<(Nanos, u32)>,
}

/// The most entries the list holds; the set takes them all at one more, and gives them back
/// once it is down to `FEW / 2` (not at `FEW`: a QP going in and out at the edge would move
/// them each time).
const FEW: usize = 8;

impl TimerQueue {
    /// Moves `qpn` from deadline `old` to `new` (either may be None: not queued).
    pub fn requeue(&mut self, qpn: u32, old: Option<Nanos>, new: Option<Nanos>) {
        if old == new {
            return;
        }
        if self.many.is_empty() {
            let at = old.and_then(|t| self.few.iter().position(|&e| e == (t, qpn)));
            match (at, new) {
                (Some(i), Some(t)) => self.few[i] = (t, qpn),
                (Some(i), None) => {
                    self.few.swap_remove(i);
                }
                (None, Some(t)) => {
                    self.few.push((t, qpn));
                    if self.few.len() > FEW {
                        self.many.extend(self.few.drain(..));
                    }
                }
                (None, None) => {}
            }
            return;
        }
        if let Some(t) = old {
            self.many.remove(&(t, qpn));
        }
        if let Some(t) = new {
            self.many.insert((t, qpn));
        }
        if self.many.len() <= FEW / 2 {
            self.few.extend(std::mem::take(&mut self.many));
        }
    }

    /// The earliest deadline of all.
    pub fn next(&self) -> Option<Nanos> {
        match self.many.first() {
            Some(&(t, _)) => Some(t),
            None => self.few.iter().map(|&(t, _)| t).min(),
        }
    }

    /// The QPs due at `now`, earliest first.
    pub fn due(&self, now: Nanos) -> Vec<u32> {
        if self.many.is_empty() {
            let mut due: Vec<(Nanos, u32)> = self
                .few
                .iter()
                .copied()
                .filter(|&(t, _)| t <= now)
                .collect();
            due.sort_unstable();
            return due.into_iter().map(|(_, qpn)| qpn).collect();
        }
        self.many
            .iter()
            .take_while(|&&(t, _)| t <= now)
            .map(|&(_, qpn)| qpn)
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.few.len() + self.many.len()
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

    /// The list and the set, and the moves between them, answer as one ordered set would:
    /// random moves of up to 3 * FEW QPs, the count of QPs with a deadline drifting up and
    /// down through both edges.
    #[test]
    fn queue_answers_as_an_ordered_set_on_both_sides_of_its_edge() {
        use rand_chacha::rand_core::{RngCore, SeedableRng};
        for seed in 0..20u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let (mut q, mut model) = (TimerQueue::default(), BTreeSet::new());
            let mut queued: Vec<Option<Nanos>> = vec![None; 3 * FEW];
            let mut edges = 0;
            for step in 0..4000 {
                // Fill up during the first and third quarters, empty out in the others.
                let filling = (step / 1000) % 2 == 0;
                let qpn = (rng.next_u32() as usize) % queued.len();
                let old = queued[qpn];
                let new = match (old, filling, rng.next_u32() % 3) {
                    (_, false, 0) | (None, false, _) => None,
                    _ => Some(Nanos::from(rng.next_u32() % 64)),
                };
                let was_many = !q.many.is_empty();
                q.requeue(qpn as u32, old, new);
                let many = !q.many.is_empty();
                edges += usize::from(was_many != many);
                if let Some(t) = old {
                    model.remove(&(t, qpn as u32));
                }
                if let Some(t) = new {
                    model.insert((t, qpn as u32));
                }
                queued[qpn] = new;
                let now = Nanos::from(rng.next_u32() % 64);
                let want: Vec<u32> = model
                    .iter()
                    .take_while(|e| e.0 <= now)
                    .map(|e| e.1)
                    .collect();
                assert_eq!(
                    q.next(),
                    model.first().map(|e| e.0),
                    "seed {seed} step {step}"
                );
                assert_eq!(q.due(now), want, "seed {seed} step {step}");
                assert_eq!(q.len(), model.len(), "seed {seed} step {step}");
            }
            assert!(
                edges >= 2,
                "seed {seed}: the list and the set never took turns"
            );
        }
    }
}
