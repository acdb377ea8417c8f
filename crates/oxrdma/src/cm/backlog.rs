//! A listener's backlog where the listener reads its requests itself (an iWARP id's, over
//! TCP): the requests not answered yet, being read or waiting for the application, at most
//! `rdma_listen`'s backlog. Past it the listener takes no more connections, and the
//! kernel's listen queue holds the rest (then SYNs go unanswered, and peers send them
//! again), as with a TCP server that is behind: a flood of silent connections costs a
//! bounded number of threads and waits, and no request is turned away for it.

use crate::lock::lock;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Debug)]
pub(super) struct Backlog {
    limit: usize,
    pending: Mutex<usize>,
    room: Condvar,
}

/// One request's place in a backlog, given back when dropped (the request answered,
/// refused, or failed).
#[derive(Debug)]
pub(super) struct Slot(Arc<Backlog>);

impl Backlog {
    /// At most `limit` requests unanswered (0 counts as 1, as the device's CM does).
    pub fn new(limit: usize) -> Arc<Backlog> {
        Arc::new(Backlog {
            limit: limit.max(1),
            pending: Mutex::new(0),
            room: Condvar::new(),
        })
    }

    /// A place, once there is one; None if `wanted` stops holding first (the listener
    /// is gone), which is looked at every 50 ms.
    pub fn wait_for_room(self: &Arc<Self>, wanted: impl Fn() -> bool) -> Option<Slot> {
        let mut pending = lock(&self.pending);
        loop {
            if !wanted() {
                return None;
            }
            if *pending < self.limit {
                *pending += 1;
                return Some(Slot(self.clone()));
            }
            pending = self
                .room
                .wait_timeout(pending, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *lock(&self.0.pending) -= 1;
        self.0.room.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_backlog_waits_until_a_place_is_given_back_or_it_is_not_wanted() {
        let b = Backlog::new(2);
        let (s1, _s2) = (
            b.wait_for_room(|| true).unwrap(),
            b.wait_for_room(|| true).unwrap(),
        );
        assert!(b.wait_for_room(|| false).is_none());
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || b2.wait_for_room(|| true));
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !waiter.is_finished(),
            "a third place was given with two taken"
        );
        drop(s1);
        let s3 = waiter.join().unwrap();
        assert!(s3.is_some());
        assert_eq!(*lock(&b.pending), 2, "the third holds the place it got");
        drop(s3);
        assert_eq!(*lock(&b.pending), 1);
    }

    #[test]
    fn a_backlog_of_zero_holds_one() {
        let b = Backlog::new(0);
        let s = b.wait_for_room(|| true);
        assert!(s.is_some());
        assert_eq!(b.limit, 1);
    }
}
