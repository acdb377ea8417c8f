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
//! noticed at the engine thread's next look (`engine::RECHECK`), which takes the device
//! over and zeroes the score. A program that waits for a peer's WRITE after each poll
//! (ib_write_lat) wakes the engine thread every time and keeps its hand-offs.
//!
//! The score is a value; the driver keeps it in an atomic that application threads and
//! the engine thread update (`Score::of` and the functions here).

use crate::Nanos;

/// The score from which a poll that finds completions does not hand the socket over.
pub const SKIP_AT: u32 = 16;

/// The highest score.
const MAX: u32 = 2 * SKIP_AT;

/// What a packet that woke the engine thread while the application was away costs.
const WOKEN_PENALTY: u32 = SKIP_AT;

/// What a slow return costs.
const LATE_PENALTY: u32 = 4;

/// A program that polls again this soon after finding completions did not go away.
pub const QUICK_NS: Nanos = 20_000;

/// Needless hand-offs, less penalties (0 to `MAX`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Score(pub u32);

impl Score {
    /// Whether polls that find completions no longer hand the socket over: the application
    /// comes back at once after them.
    pub fn skipping(self) -> bool {
        self.0 >= SKIP_AT
    }

    /// The first empty poll after one that found completions at `found_at`, at `now`.
    #[must_use]
    pub fn polled_again(self, found_at: Nanos, now: Nanos) -> Score {
        if now.saturating_sub(found_at) < QUICK_NS {
            Score((self.0 + 1).min(MAX))
        } else {
            Score(self.0.saturating_sub(LATE_PENALTY))
        }
    }

    /// A packet woke the engine thread while the application was away.
    #[must_use]
    pub fn woken(self) -> Score {
        Score(self.0.saturating_sub(WOKEN_PENALTY))
    }

    /// The engine thread took the device over from an application that stopped calling
    /// in: hand-offs are needed from now on.
    #[must_use]
    pub fn taken_over(self) -> Score {
        Score(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` polls that find completions, each followed by an empty one `back` ns later;
    /// whether each handed the socket over.
    fn round_trips(s: &mut Score, n: u32, back: Nanos) -> Vec<bool> {
        (0..n)
            .map(|i| {
                let t = Nanos::from(i) * 100_000;
                let handed = !s.skipping();
                *s = s.polled_again(t, t + back);
                handed
            })
            .collect()
    }

    #[test]
    fn a_ping_pong_stops_handing_off_and_a_slip_now_and_then_does_not_undo_it() {
        let mut s = Score::default();
        let handed = round_trips(&mut s, 40, 3_000);
        assert!(handed[..SKIP_AT as usize].iter().all(|&x| x));
        assert!(handed[SKIP_AT as usize..].iter().all(|&x| !x));
        assert!(s.skipping());
        // Three late returns in a row from the top score still skip.
        assert!(round_trips(&mut s, 3, QUICK_NS).iter().all(|&x| !x));
        assert!(s.skipping());
        s = s.woken();
        assert!(
            !s.skipping(),
            "a packet that woke the engine thread hands off again"
        );
    }

    #[test]
    fn a_program_that_needs_them_keeps_its_hand_offs() {
        // ib_write_lat: a packet wakes the engine thread after every poll that found.
        let mut s = Score::default();
        for i in 0..100u64 {
            assert!(!s.skipping(), "round {i}");
            s = s.woken().polled_again(i * 100_000, i * 100_000 + 3_000);
        }
        // One that comes back late once in four.
        let mut s = Score::default();
        for i in 0..100u32 {
            let back = if i % 4 == 0 { QUICK_NS } else { 3_000 };
            assert!(round_trips(&mut s, 1, back)[0], "round {i}");
        }
    }

    #[test]
    fn a_take_over_starts_the_score_again() {
        let mut s = Score::default();
        round_trips(&mut s, 100, 3_000);
        assert!(s.skipping());
        s = s.taken_over();
        let handed = round_trips(&mut s, 40, 3_000);
        assert_eq!(handed.iter().filter(|&&x| x).count(), SKIP_AT as usize);
    }
}
