//! The replay window of a secure QP's receiving side: every packet carries a sequence
//! number its sender never repeats under one key; one already seen, or older than the
//! window, is dropped before anything is placed. Retransmissions are new packets with new
//! numbers, so the window only has to span the network's reordering.

/// Sequence numbers the window spans below the highest seen.
pub(crate) const WINDOW: u64 = 4096;
const WORDS: usize = (WINDOW / 64) as usize;

#[derive(Debug, Clone)]
pub(crate) struct Replay {
    /// One past the highest number accepted (0: none yet).
    top: u64,
    /// Bit `n % WINDOW` set: `n` was accepted (for `n` within the window).
    seen: [u64; WORDS],
}

impl Default for Replay {
    fn default() -> Self {
        Replay {
            top: 0,
            seen: [0; WORDS],
        }
    }
}

impl Replay {
    fn bit(n: u64) -> (usize, u64) {
        let i = n % WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// Whether `n` may be new: not seen, not older than the window. Checked before the
    /// packet is authenticated; [`Self::accept`] records it after.
    pub(crate) fn fresh(&self, n: u64) -> bool {
        if n >= self.top {
            return n != u64::MAX;
        }
        if self.top - n > WINDOW {
            return false;
        }
        let (w, b) = Self::bit(n);
        self.seen[w] & b == 0
    }

    /// Records `n` (authenticated and fresh).
    pub(crate) fn accept(&mut self, n: u64) {
        if n >= self.top {
            // Forget what slides out of the window: the numbers top..=n reuse their bits.
            let new = n + 1;
            if new - self.top >= WINDOW {
                self.seen = [0; WORDS];
            } else {
                for m in self.top..new {
                    let (w, b) = Self::bit(m);
                    self.seen[w] &= !b;
                }
            }
            self.top = new;
        }
        let (w, b) = Self::bit(n);
        self.seen[w] |= b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_number_is_taken_once_and_the_old_ones_never() {
        let mut r = Replay::default();
        for n in [0, 1, 5, 3, 2] {
            assert!(r.fresh(n), "{n}");
            r.accept(n);
            assert!(!r.fresh(n), "{n} again");
        }
        assert!(r.fresh(4));
        r.accept(10_000);
        assert!(!r.fresh(4), "slid out of the window");
        assert!(r.fresh(10_000 - WINDOW + 1), "the oldest the window holds");
        assert!(!r.fresh(10_000 - WINDOW), "one older");
        r.accept(10_001);
        assert!(!r.fresh(10_000) && !r.fresh(10_001));
        assert!(r.fresh(9_999));
        assert!(!r.fresh(u64::MAX), "the number a sender never reaches");
    }

    #[test]
    fn a_window_that_moves_by_less_than_its_size_forgets_exactly_what_left() {
        let mut r = Replay::default();
        for n in 0..WINDOW {
            r.accept(n);
        }
        r.accept(WINDOW + 100);
        assert!(!r.fresh(101), "still in the window and seen");
        assert!(!r.fresh(100), "out of the window");
        for n in WINDOW..WINDOW + 100 {
            assert!(r.fresh(n), "{n}: its bit was another number's");
        }
    }
}
