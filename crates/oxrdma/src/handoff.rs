//! The hand-off score (`oxrdma_core::driving::handoff`) as the threads share it: an
//! atomic that application threads and the engine thread update.

use oxrdma_core::driving::Score;
use oxrdma_core::Nanos;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Handoff {
    /// When the last poll that found completions ran (ns on the device's clock).
    found_at: AtomicU64,
    score: AtomicU32,
}

impl Handoff {
    /// The score now.
    pub fn score(&self) -> Score {
        Score(self.score.load(Ordering::Relaxed))
    }

    /// A poll found completions at `now`.
    pub fn found(&self, now: Nanos) {
        self.found_at.store(now, Ordering::Relaxed);
    }

    /// The first empty poll after one that found completions, at `now`.
    pub fn polled_again(&self, now: Nanos) {
        let found_at = self.found_at.load(Ordering::Relaxed);
        self.update(|s| s.polled_again(found_at, now));
    }

    /// A packet woke the engine thread while the application was away.
    pub fn woken(&self) {
        self.update(Score::woken);
    }

    /// The engine thread took the device over from an application that stopped calling in.
    pub fn taken_over(&self) {
        self.update(Score::taken_over);
    }

    /// An update, not a load and a store: the engine thread's word must not be overwritten
    /// by a score read before it.
    fn update(&self, f: impl Fn(Score) -> Score) {
        let _ = self
            .score
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some(f(Score(s)).0)
            });
    }
}
