//! Which response packets of a READ (or the ACK of an atomic) arrived ahead of `una`.
//! They are placed by PSN as they come, so after a loss only the missing packets are asked
//! for again (a go-back to the first missing one would have the responder resend all the
//! rest, and every later READ: under loss that multiplied READ traffic).

/// A set of packet indexes within one READ (0: its first PSN). Empty, and without memory,
/// until a response arrives out of order.
#[derive(Debug, Default)]
pub(crate) struct Arrived {
    bits: Vec<u64>,
}

impl Arrived {
    pub(crate) fn insert(&mut self, i: u32) {
        let (word, bit) = (i as usize / 64, i % 64);
        if self.bits.len() <= word {
            self.bits.resize(word + 1, 0);
        }
        self.bits[word] |= 1 << bit;
    }

    /// The first index at or after `from` that has not arrived.
    pub(crate) fn next_missing(&self, from: u32) -> u32 {
        self.next_where(from, |w| !w)
            .unwrap_or(from.max(self.end()))
    }

    /// The first index at or after `from` that has arrived, if any.
    pub(crate) fn next_arrived(&self, from: u32) -> Option<u32> {
        self.next_where(from, |w| w)
    }

    /// One past the last index the set has room for.
    fn end(&self) -> u32 {
        u32::try_from(self.bits.len() * 64).unwrap_or(u32::MAX)
    }

    /// The first index at or after `from` whose bit is set in `view(word)`.
    fn next_where(&self, from: u32, view: impl Fn(u64) -> u64) -> Option<u32> {
        let mut word = from as usize / 64;
        // Bits below `from` in its word do not count.
        let mut mask = u64::MAX << (from % 64);
        while let Some(&w) = self.bits.get(word) {
            let hits = view(w) & mask;
            if hits != 0 {
                return u32::try_from(word * 64)
                    .ok()
                    .map(|b| b + hits.trailing_zeros());
            }
            (word, mask) = (word + 1, u64::MAX);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Arrived;

    #[test]
    fn finds_the_gaps_between_what_arrived() {
        let mut a = Arrived::default();
        assert_eq!((a.next_missing(0), a.next_arrived(0)), (0, None));
        for i in [3, 4, 70, 5] {
            a.insert(i);
        }
        assert_eq!(
            (a.next_missing(4), a.next_missing(70), a.next_missing(1000)),
            (6, 71, 1000)
        );
        assert_eq!(a.next_missing(3), 6);
        assert_eq!(a.next_missing(0), 0);
        assert_eq!(a.next_arrived(0), Some(3));
        assert_eq!(a.next_arrived(6), Some(70));
        assert_eq!(a.next_arrived(71), None);
    }
}
