//! Completion queues: fixed depth; overflow puts the CQ in error and raises an async event,
//! but the completion is kept, never dropped.
//!
//! The entries live in a lock-free ring ([`CqRing`]) that application threads may pop
//! without the engine: polling a CQ with completions in it never waits for the NIC.

use crate::wr::WorkCompletion;
use crossbeam_queue::ArrayQueue;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The entries of one CQ, shared by the engine (which pushes) and pollers (which pop).
#[derive(Debug)]
pub struct CqRing {
    queue: ArrayQueue<WorkCompletion>,
    /// Completions ever added (the ring's and the spill's): an armed CQ reports the
    /// completions added after the arm, which this count tells from those before it.
    added: AtomicU64,
}

impl CqRing {
    /// How many completions the CQ has ever been given. Read after this, the ring holds
    /// (or has handed out) every one of them.
    pub fn added(&self) -> u64 {
        self.added.load(Ordering::Acquire)
    }
    /// The oldest completion, if any.
    pub fn pop(&self) -> Option<WorkCompletion> {
        self.queue.pop()
    }
    /// Completions in the ring now (not those the engine still holds back for want of
    /// room).
    pub fn len(&self) -> usize {
        self.queue.len()
    }
    /// Whether the ring holds no completion.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[derive(Debug)]
pub(crate) struct Cq {
    ring: Arc<CqRing>,
    /// The CQ's depth: more entries than this overflow it. The ring holds the depth the CQ
    /// was made with (pollers keep it); after a resize to more, what does not fit waits in
    /// `spill` and reaches pollers through the engine.
    depth: usize,
    /// Completions beyond the depth, waiting for room in the ring (in order).
    spill: VecDeque<WorkCompletion>,
    /// Set once the CQ held more than its depth.
    overflowed: bool,
}

impl Cq {
    pub fn new(depth: usize) -> Self {
        Cq {
            ring: Arc::new(CqRing {
                queue: ArrayQueue::new(depth),
                added: AtomicU64::new(0),
            }),
            depth,
            spill: VecDeque::new(),
            overflowed: false,
        }
    }

    /// `ibv_resize_cq`: any depth that holds what the CQ holds now.
    pub fn resize(&mut self, depth: usize) -> bool {
        if depth < self.len() {
            return false;
        }
        self.depth = depth;
        true
    }

    pub fn ring(&self) -> Arc<CqRing> {
        self.ring.clone()
    }

    /// Moves spilled completions into the ring as far as it has room.
    fn refill(&mut self) {
        while let Some(&wc) = self.spill.front() {
            if self.ring.queue.push(wc).is_err() {
                break;
            }
            self.spill.pop_front();
        }
    }

    /// Adds a completion; returns true if this push overflowed the queue for the first time.
    pub fn push(&mut self, wc: WorkCompletion) -> bool {
        self.refill();
        let over = self.len() >= self.depth;
        if self.spill.is_empty() {
            if let Err(wc) = self.ring.queue.push(wc) {
                self.spill.push_back(wc);
            }
        } else {
            self.spill.push_back(wc);
        }
        // After the entry is in place: whoever sees the count finds the entry.
        self.ring.added.fetch_add(1, Ordering::Release);
        over && !std::mem::replace(&mut self.overflowed, true)
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many.
    pub fn take(&mut self, max: usize, mut f: impl FnMut(WorkCompletion)) -> usize {
        let mut n = 0;
        while n < max {
            self.refill();
            match self.ring.pop() {
                Some(wc) => f(wc),
                None => break,
            }
            n += 1;
        }
        self.refill();
        n
    }

    pub fn len(&self) -> usize {
        self.ring.len() + self.spill.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{WcOpcode, WcStatus};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, 1)
    }

    #[test]
    fn overflow_is_reported_once_and_loses_nothing_out_of_order() {
        let mut cq = Cq::new(4);
        let ring = cq.ring();
        let overflows: Vec<bool> = (0..10).map(|i| cq.push(wc(i))).collect();
        assert_eq!(overflows.iter().filter(|&&o| o).count(), 1);
        assert!(overflows[4], "the fifth entry overflows a CQ of four");
        assert_eq!(cq.len(), 10);
        // A lock-free poller sees the first four; the rest follow as room appears.
        let first: Vec<u64> = std::iter::from_fn(|| ring.pop()).map(|w| w.wr_id).collect();
        assert_eq!(first, vec![0, 1, 2, 3]);
        cq.push(wc(10));
        let mut rest = Vec::new();
        assert_eq!(cq.take(100, |w| rest.push(w.wr_id)), 7);
        assert_eq!(rest, (4..=10).collect::<Vec<_>>());
        assert!(!cq.push(wc(11)), "overflow is reported once");
    }

    #[test]
    fn a_resized_cq_overflows_at_its_new_depth_and_keeps_order() {
        let mut cq = Cq::new(2);
        assert!(!cq.push(wc(0)) && !cq.push(wc(1)));
        assert!(!cq.resize(1), "smaller than what it holds");
        assert!(cq.resize(5));
        // Three more fit (the ring holds two, the rest wait in order); the sixth overflows.
        assert!(!cq.push(wc(2)) && !cq.push(wc(3)) && !cq.push(wc(4)));
        assert!(cq.push(wc(5)));
        let mut all = Vec::new();
        assert_eq!(cq.take(100, |w| all.push(w.wr_id)), 6);
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        assert!(cq.resize(1), "empty: any depth");
    }
}
