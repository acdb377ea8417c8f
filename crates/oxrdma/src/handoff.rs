//! Whether a CQ poll that finds completions hands the socket to the engine thread.
//!
//! After such a poll the application may wait elsewhere (the target of an RDMA WRITE may
//! spin on its memory), so the engine thread must watch the socket, at one `epoll_ctl` to
//! arm it on the poll's path and one to disarm it at the next empty poll: 6 % of an 8 B
//! ping-pong's round trip here. A ping-pong comes back at once, though: it posts its
//! answer and polls again within microseconds, and nothing arrives meanwhile that could
//! not wait for it. So hand-offs are scored. One after which the application polled again
//! within `QUICK_NS`, with no packet waking the engine thread meanwhile, scores a point; a
//! packet that woke the engine thread while the application was away costs
//! `WOKEN_PENALTY`, a slow return `LATE_PENALTY` (the scheduler keeps a ping-pong's thread
//! away now and then: 0.5-1 % of its round trips on this 2-core host). From `SKIP_AT`
//! points on, polls do not hand the socket over; an application that then stays away is
//! noticed at the engine thread's next look (1 to 5 ms, `nic.rs`), which takes the device
//! over and zeroes the score. A program that waits for a peer's WRITE after each poll
//! (ib_write_lat) wakes the engine thread every time and keeps its hand-offs.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The score from which a poll that finds completions does not hand the socket over.
const SKIP_AT: u32 = 16;

/// The highest score.
const MAX: u32 = 2 * SKIP_AT;

/// What a packet that woke the engine thread while the application was away costs.
const WOKEN_PENALTY: u32 = SKIP_AT;

/// What a slow return costs.
const LATE_PENALTY: u32 = 4;

/// A program that polls again this soon after finding completions did not go away.
const QUICK_NS: u64 = 20_000;

#[derive(Debug, Default)]
pub(crate) struct Handoff {
    /// When the last poll that found completions ran (ns on the device's clock).
    found_at: AtomicU64,
    /// Needless hand-offs, less penalties (0 to `MAX`).
    score: AtomicU32,
}

impl Handoff {
    /// A poll found completions at `now`: whether to hand the socket to the engine thread.
    pub fn found(&self, now: u64) -> bool {
        self.found_at.store(now, Ordering::Relaxed);
        !self.skipping()
    }

    /// Whether polls that find completions no longer hand the socket over: the application
    /// comes back at once after them.
    pub fn skipping(&self) -> bool {
        self.score.load(Ordering::Relaxed) >= SKIP_AT
    }

    /// The first empty poll after one that found completions, at `now`.
    pub fn polled_again(&self, now: u64) {
        let away = now.saturating_sub(self.found_at.load(Ordering::Relaxed));
        if away < QUICK_NS {
            self.update(|s| (s + 1).min(MAX));
        } else {
            self.update(|s| s.saturating_sub(LATE_PENALTY));
        }
    }

    /// A packet woke the engine thread while the application was away.
    pub fn woken(&self) {
        self.update(|s| s.saturating_sub(WOKEN_PENALTY));
    }

    /// The engine thread took the device over from an application that stopped calling
    /// in: hand-offs are needed from now on.
    pub fn taken_over(&self) {
        self.score.store(0, Ordering::Relaxed);
    }

    /// An update, not a load and a store: the engine thread's word must not be overwritten
    /// by a score read before it.
    fn update(&self, f: impl Fn(u32) -> u32) {
        let _ = self
            .score
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some(f(s)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` polls that find completions, each followed by an empty one `back` ns later;
    /// whether each handed the socket over.
    fn round_trips(h: &Handoff, n: u32, back: u64) -> Vec<bool> {
        (0..n)
            .map(|i| {
                let t = u64::from(i) * 100_000;
                let handed = h.found(t);
                h.polled_again(t + back);
                handed
            })
            .collect()
    }

    #[test]
    fn a_ping_pong_stops_handing_off_and_a_slip_now_and_then_does_not_undo_it() {
        let h = Handoff::default();
        let handed = round_trips(&h, 40, 3_000);
        assert!(handed[..SKIP_AT as usize].iter().all(|&x| x));
        assert!(handed[SKIP_AT as usize..].iter().all(|&x| !x));
        assert!(h.skipping());
        // Three late returns in a row from the top score still skip.
        assert!(round_trips(&h, 3, QUICK_NS).iter().all(|&x| !x));
        assert!(!h.found(0));
        h.woken();
        assert!(!h.skipping());
        assert!(
            h.found(0),
            "a packet that woke the engine thread hands off again"
        );
    }

    #[test]
    fn a_program_that_needs_them_keeps_its_hand_offs() {
        // ib_write_lat: a packet wakes the engine thread after every poll that found.
        let h = Handoff::default();
        for i in 0..100u64 {
            assert!(h.found(i * 100_000), "round {i}");
            h.woken();
            h.polled_again(i * 100_000 + 3_000);
        }
        // One that comes back late once in four.
        let h = Handoff::default();
        for i in 0..100u32 {
            let back = if i % 4 == 0 { QUICK_NS } else { 3_000 };
            assert!(round_trips(&h, 1, back)[0], "round {i}");
        }
    }

    #[test]
    fn a_take_over_starts_the_score_again() {
        let h = Handoff::default();
        round_trips(&h, 100, 3_000);
        assert!(!h.found(0));
        h.taken_over();
        let handed = round_trips(&h, 40, 3_000);
        assert_eq!(handed.iter().filter(|&&x| x).count(), SKIP_AT as usize);
    }
}
