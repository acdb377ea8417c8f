//! Which request last asked for each response packet of a READ. The requester numbers its
//! request packets; a READ asked again in pieces has a different number per piece, and
//! the responder answers in request order, so a response's number tells which missing
//! responses, asked for earlier, are lost (and which are still on their way).

/// Request numbers by packet index within one READ: `base` from index 0 up to the first
/// entry of `rest`, then each entry's number from its index up to the next. No memory
/// until the READ is asked for in pieces.
#[derive(Debug, Default)]
pub(crate) struct Asks {
    base: u64,
    rest: Vec<(u32, u64)>,
}

impl Asks {
    /// Packets `from..to` were just asked for by request `n`.
    pub(crate) fn record(&mut self, from: u32, to: u32, n: u64) {
        if from == 0 && self.rest.iter().all(|&(i, _)| i < to) {
            self.rest.clear();
            self.base = n;
            return;
        }
        let after = self.of(to);
        self.rest.retain(|&(i, _)| i < from || i > to);
        let at = self.rest.partition_point(|&(i, _)| i < from);
        self.rest.insert(at, (from, n));
        if !self.rest.iter().any(|&(i, _)| i == to) {
            self.rest.insert(at + 1, (to, after));
        }
    }

    /// The request that last asked for packet `i`.
    pub(crate) fn of(&self, i: u32) -> u64 {
        let at = self.rest.partition_point(|&(j, _)| j <= i);
        at.checked_sub(1).map_or(self.base, |k| self.rest[k].1)
    }
}

#[cfg(test)]
mod tests {
    use super::Asks;

    #[test]
    fn pieces_asked_again_keep_their_own_numbers() {
        let mut a = Asks::default();
        a.record(0, 64, 5);
        assert_eq!((a.of(0), a.of(63)), (5, 5));
        a.record(10, 11, 20);
        a.record(30, 40, 21);
        let at = [9, 10, 11, 29, 30, 39, 40, 63].map(|i| a.of(i));
        assert_eq!(at, [5, 20, 5, 5, 21, 21, 5, 5]);
        a.record(10, 11, 30);
        assert_eq!((a.of(10), a.of(11)), (30, 5));
        a.record(0, 64, 40);
        assert_eq!((a.of(10), a.of(35), a.of(63)), (40, 40, 40));
    }
}
