//! Whether `riowrite` waits a moment in the caller's thread for the peer's answer.
//!
//! A program that writes with `riowrite` and then spins on its own memory for the answer
//! (riostream) calls nothing while it waits, so only the engine thread can place the
//! peer's write: a wake-up per message, and on a host whose cores the spinning programs
//! hold, the scheduler's delay too (riostream 64 B: 40 us a message against rstream's 5).
//! Where the peer answered our last write, the thread that is about to spin polls the
//! device itself for up to `BUDGET` first, as a socket's busy poll (`SO_BUSY_POLL`) does
//! on a NIC's queue, and returns once the answer is placed. A writer whose peer does not
//! answer (a stream of writes) never waits; one whose peer stops answering in time waits
//! less and less often.

use std::time::Duration;

/// How long a write waits for the answer at most: a ping-pong's round trip on one host
/// is ~10 us.
pub(super) const BUDGET: Duration = Duration::from_micros(100);

/// Waits that missed in a row before the writer stops trying for a while: after the
/// n-th, 2^n writes go without waiting (at most 64).
const MAX_MISSES: u32 = 6;

/// The writer's record of its peer's answers.
#[derive(Debug, Default)]
pub(super) struct AnswerWait {
    /// The device's requests received when the last write was posted.
    last: u64,
    misses: u32,
    skip: u32,
}

impl AnswerWait {
    /// A write is posted, the device having received `received` requests so far: whether
    /// to wait for the answer. Only when the peer answered the last write (a request came
    /// since), and not while backing off.
    pub fn wants(&mut self, received: u64) -> bool {
        let answered = received > self.last;
        self.last = received;
        if !answered {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// The wait ended: `caught` the answer, or the budget ran out.
    pub fn waited(&mut self, caught: bool) {
        if caught {
            self.misses = 0;
        } else {
            self.misses = (self.misses + 1).min(MAX_MISSES);
            self.skip = 1 << self.misses;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_waits_only_after_its_peer_answered() {
        let mut a = AnswerWait::default();
        // A stream: nothing comes back between writes.
        assert!(!a.wants(0));
        assert!(!a.wants(0));
        // A ping-pong: the peer's write came after ours.
        assert!(a.wants(1));
        a.waited(true);
        assert!(a.wants(2));
        a.waited(true);
        assert!(!a.wants(2), "no answer since the last write");
    }

    #[test]
    fn a_peer_that_answers_late_is_waited_for_less_and_less_often() {
        let mut a = AnswerWait::default();
        let mut received = 0;
        let mut waits = Vec::new();
        for _ in 0..40 {
            received += 1;
            let w = a.wants(received);
            if w {
                a.waited(false);
            }
            waits.push(w);
        }
        // Waited at writes 0, 3, 8, 17, 34: 2, 4, 8, 16 writes skipped between.
        let at: Vec<_> = (0..40).filter(|&i| waits[i]).collect();
        assert_eq!(at, [0, 3, 8, 17, 34]);
        // An answer in time ends the back-off.
        let mut b = AnswerWait::default();
        assert!(b.wants(1));
        b.waited(false);
        assert!(!b.wants(2) && !b.wants(3));
        assert!(b.wants(4));
        b.waited(true);
        assert!(b.wants(5));
    }
}
