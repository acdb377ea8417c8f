//! Request packets that came ahead of a gap from a requester that speaks selective repeat:
//! kept, as they arrived, until the gap fills, then handed to the responder in PSN order.
//! Every request is still executed in order and once (IBA's C9-28: two WRITEs to the same
//! bytes must land in the order sent), so placing early packets costs one copy each and
//! nothing else changes. What is kept is what the SACK bitmap of the responder's ACKs shows.

use oxrdma_wire::Psn;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// PSNs past the expected one that may be kept, at most.
pub(crate) const MAX_SPAN: u32 = 1 << 16;
/// Bytes kept per QP, at most (a 200 Mbit/s path with 150 ms of round trip and queue holds
/// under 4 MiB).
const MAX_BYTES: usize = 32 << 20;

/// Bytes kept ahead of gaps over all of a device's QPs, and the most there may be
/// (`PeerLimits::reorder_bytes`): peers that open gaps on many QPs and never fill them
/// cannot take the host's memory.
#[derive(Debug)]
pub(crate) struct ReorderPool {
    held: AtomicUsize,
    max: usize,
}

impl ReorderPool {
    pub(crate) fn new(max: usize) -> Arc<ReorderPool> {
        Arc::new(ReorderPool {
            held: AtomicUsize::new(0),
            max,
        })
    }

    /// Takes `n` bytes if they fit.
    fn take(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                h.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// Packets by PSN from `base` (the responder's expected PSN, once `take` has caught up).
#[derive(Debug)]
pub(crate) struct Reorder {
    base: Psn,
    slots: VecDeque<Option<Box<[u8]>>>,
    bytes: usize,
    pool: Arc<ReorderPool>,
}

impl Drop for Reorder {
    fn drop(&mut self) {
        self.pool.give(self.bytes);
    }
}

impl Reorder {
    pub(crate) fn new(pool: Arc<ReorderPool>) -> Reorder {
        Reorder {
            base: Psn::default(),
            slots: VecDeque::new(),
            bytes: 0,
            pool,
        }
    }

    /// The pool it takes from.
    pub(crate) fn pool(&self) -> Arc<ReorderPool> {
        self.pool.clone()
    }

    fn freed(&mut self, n: usize) {
        self.bytes -= n;
        self.pool.give(n);
    }

    /// Keeps `packet`, whose PSN is `psn`, while `epsn` is expected; false if there is no
    /// room for it (too far ahead, or too many bytes kept): the requester will send it again.
    /// A copy already kept stays.
    pub(crate) fn hold(&mut self, epsn: Psn, psn: Psn, packet: &[u8]) -> bool {
        self.catch_up(epsn);
        let i = epsn.distance_to(psn);
        if i >= MAX_SPAN || self.bytes + packet.len() > MAX_BYTES {
            return false;
        }
        let i = i as usize;
        if self.slots.get(i).is_some_and(Option::is_some) {
            return true;
        }
        if !self.pool.take(packet.len()) {
            return false;
        }
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        self.bytes += packet.len();
        self.slots[i] = Some(packet.into());
        true
    }

    /// The packet kept for `epsn`, if any (those before it are forgotten).
    pub(crate) fn take(&mut self, epsn: Psn) -> Option<Box<[u8]>> {
        if self.slots.is_empty() {
            return None;
        }
        self.catch_up(epsn);
        self.slots.front()?.as_ref()?;
        let p = self.slots.pop_front().flatten()?;
        self.base = self.base.next();
        self.freed(p.len());
        Some(p)
    }

    /// Puts back the packet `take` gave for `epsn` (it could not be executed yet).
    pub(crate) fn put_back(&mut self, epsn: Psn, packet: Box<[u8]>) {
        self.catch_up(epsn);
        // What `take` just gave back, held again even if others took the room meanwhile.
        self.pool.held.fetch_add(packet.len(), Ordering::Relaxed);
        self.bytes += packet.len();
        match self.slots.front_mut() {
            Some(slot) => *slot = Some(packet),
            None => self.slots.push_back(Some(packet)),
        }
    }

    /// Whether nothing is kept (then nothing waits to be executed after a packet).
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether a packet with PSN `psn` is kept.
    pub(crate) fn holds(&self, psn: Psn) -> bool {
        let i = self.base.distance_to(psn) as usize;
        self.slots.get(i).is_some_and(Option::is_some)
    }

    /// One past the highest PSN kept, if any is.
    pub(crate) fn end(&self) -> Option<Psn> {
        let last = self.slots.iter().rposition(Option::is_some)?;
        Some(self.base.add(last as u32 + 1))
    }

    /// Forgets everything (the QP was reset or failed).
    pub(crate) fn clear(&mut self) {
        *self = Reorder::new(self.pool.clone());
    }

    /// Moves `base` up to `epsn`, dropping what lies before it.
    fn catch_up(&mut self, epsn: Psn) {
        if self.slots.is_empty() {
            self.base = epsn;
            return;
        }
        let n = (self.base.distance_to(epsn) as usize).min(self.slots.len());
        let freed: usize = self.slots.drain(..n).flatten().map(|p| p.len()).sum();
        self.freed(freed);
        self.base = epsn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_packets_ahead_and_gives_them_back_in_order() {
        let mut r = Reorder::new(ReorderPool::new(usize::MAX));
        let e = Psn::new(0xff_fffe);
        assert!(r.hold(e, e.add(2), b"c"));
        assert!(r.hold(e, e.add(3), b"d"));
        assert!(r.hold(e, e.add(5), b"f"));
        assert!(r.hold(e, e.add(3), b"x"), "a duplicate is no error");
        let held: Vec<_> = (0..7).filter(|&i| r.holds(e.add(i))).collect();
        assert_eq!(held, [2, 3, 5]);
        assert_eq!(r.end(), Some(e.add(6)));
        assert!(r.take(e).is_none());
        assert!(r.take(e.add(1)).is_none());
        assert_eq!(r.take(e.add(2)).as_deref(), Some(&b"c"[..]));
        assert_eq!(
            r.take(e.add(3)).as_deref(),
            Some(&b"d"[..]),
            "the first copy"
        );
        assert!(r.take(e.add(4)).is_none());
        let f = r.take(e.add(5)).unwrap();
        r.put_back(e.add(5), f);
        assert!(r.holds(e.add(5)));
        assert_eq!(r.take(e.add(5)).as_deref(), Some(&b"f"[..]));
        assert_eq!((r.bytes, r.slots.len(), r.end()), (0, 0, None));
    }

    #[test]
    fn forgets_what_the_expected_psn_passed_and_bounds_what_it_keeps() {
        let mut r = Reorder::new(ReorderPool::new(usize::MAX));
        assert!(r.hold(Psn::new(10), Psn::new(12), &[0; 100]));
        // A READ of 5 responses at 10 moved ePSN to 15 past the slot of 12.
        assert!(r.take(Psn::new(15)).is_none());
        assert_eq!((r.bytes, r.holds(Psn::new(12))), (0, false));
        assert!(!r.hold(Psn::new(0), Psn::new(MAX_SPAN), &[0]));
        assert!(r.hold(Psn::new(0), Psn::new(MAX_SPAN - 1), &[0]));
        let big = vec![0; MAX_BYTES];
        assert!(!r.hold(Psn::new(0), Psn::new(1), &big));
    }

    #[test]
    fn a_device_keeps_no_more_than_its_pool_over_all_its_qps() {
        let pool = ReorderPool::new(250);
        let (mut a, mut b) = (Reorder::new(pool.clone()), Reorder::new(pool.clone()));
        let e = Psn::new(7);
        assert!(a.hold(e, e.add(1), &[1; 100]));
        assert!(a.hold(e, e.add(2), &[2; 100]));
        assert!(!b.hold(e, e.add(1), &[3; 100]), "the pool is spent");
        assert!(b.hold(e, e.add(1), &[3; 50]));
        assert_eq!(pool.held(), 250);
        // The gap fills: a gives its first packet back, then its QP is reset.
        assert!(a.take(e.add(1)).is_some());
        assert_eq!(pool.held(), 150);
        a.clear();
        assert_eq!(pool.held(), 50);
        assert!(a.hold(e, e.add(1), &[4; 200]));
        // A destroyed QP returns what it kept.
        drop(b);
        drop(a);
        assert_eq!(pool.held(), 0);
    }
}
