//! What an armed CQ reports to (`channel.rs` waits on it): a counting descriptor and
//! the CQs of the events waiting, and what the channel's waiters did.

use crate::lock::lock;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What an armed CQ reports to: a counting file descriptor (one count per event, so
/// `poll` says readable exactly while events wait) and which CQs the events are for.
#[derive(Debug)]
pub(crate) struct ChannelInner {
    pub(crate) fd: OwnedFd,
    fired: Mutex<Fired>,
    pub(crate) stats: Counters,
}

/// What a channel's waiters did (`ChannelStats`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) events: AtomicU64,
    pub(crate) moved_by_waiter: AtomicU64,
    pub(crate) spun: AtomicU64,
    pub(crate) slept: AtomicU64,
}

/// The events waiting. The descriptor's count is changed under this lock, so it equals
/// `cqs.len() - unsignalled` whenever the lock is free.
#[derive(Debug, Default)]
struct Fired {
    /// The CQ of each event, oldest first.
    cqs: VecDeque<u32>,
    /// Events that a waiter brought on itself while moving packets, not counted on the
    /// descriptor: it takes them at once, and the count's write and read are two system
    /// calls of a round trip.
    unsignalled: u64,
}

thread_local! {
    /// The channel this thread waits on while it moves the device's packets.
    static WAITING_ON: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl ChannelInner {
    /// A new channel's events, counted on `fd` (an eventfd in semaphore mode).
    pub(crate) fn new(fd: OwnedFd) -> ChannelInner {
        ChannelInner {
            fd,
            fired: Mutex::new(Fired::default()),
            stats: Counters::default(),
        }
    }

    /// Runs `f` as a waiter of this channel: the events it brings on this channel are
    /// not counted on the descriptor (`take` does, for any it leaves).
    pub(crate) fn as_waiter(&self, f: impl FnOnce()) {
        WAITING_ON.set(std::ptr::from_ref(self) as usize);
        f();
        WAITING_ON.set(0);
    }

    /// Reports one event of `cq`.
    pub fn notify(&self, cq: u32) {
        let mut fired = lock(&self.fired);
        fired.cqs.push_back(cq);
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        if WAITING_ON.get() == std::ptr::from_ref(self) as usize {
            self.stats.moved_by_waiter.fetch_add(1, Ordering::Relaxed);
            fired.unsignalled += 1;
        } else {
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// The oldest event waiting, if any. Others this thread brought on itself are counted
    /// on the descriptor now, for whoever polls it.
    pub(crate) fn take(&self) -> Option<u32> {
        let mut fired = lock(&self.fired);
        let cq = fired.cqs.pop_front()?;
        if fired.unsignalled > 0 {
            fired.unsignalled -= 1;
            if fired.unsignalled > 0 {
                let n = std::mem::take(&mut fired.unsignalled);
                let _ = rustix::io::write(&self.fd, &n.to_ne_bytes());
            }
        } else {
            // The count is at least 1 (written with the event): the read does not block.
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.fd, &mut b);
        }
        Some(cq)
    }
}
