//! A device's asynchronous events (`ibv_get_async_event`): the engine's events, moved here
//! whenever a thread lets go of the device, and a file descriptor that is readable exactly
//! while some wait (`ibv_context.async_fd`), for poll, epoll or an async runtime. Each
//! open context of a device has its own queue and descriptor (`Owners` routes events).

use crate::error::Result;
use crate::lock::lock;
use oxrdma_core::AsyncEvent;
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::fs::{fcntl_getfl, OFlags};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

#[derive(Debug)]
pub(crate) struct Events {
    queue: Mutex<VecDeque<AsyncEvent>>,
    /// Counts 1 while `queue` has events, 0 while it is empty (changed under its lock).
    fd: OwnedFd,
}

impl Events {
    pub fn new() -> Result<Events> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC).map_err(std::io::Error::from)?;
        Ok(Events {
            queue: Mutex::new(VecDeque::new()),
            fd,
        })
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<AsyncEvent>> {
        lock(&self.queue)
    }

    pub fn push(&self, e: AsyncEvent) {
        let mut q = self.queue();
        if q.is_empty() {
            // An eventfd write only fails at a count near 2^64.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
        q.push_back(e);
    }

    /// The oldest event, if any.
    pub fn pop(&self) -> Option<AsyncEvent> {
        let mut q = self.queue();
        let e = q.pop_front();
        if e.is_some() && q.is_empty() {
            // The count is 1 (written when the queue stopped being empty): this read
            // takes it to 0 without blocking.
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.fd, &mut b);
        }
        e
    }

    /// The oldest event, waiting for one unless the descriptor was made non-blocking
    /// (then `None` at once, as `ibv_get_async_event` answers EAGAIN).
    pub fn wait(&self) -> Result<Option<AsyncEvent>> {
        loop {
            if let Some(e) = self.pop() {
                return Ok(Some(e));
            }
            let flags = fcntl_getfl(&self.fd).map_err(std::io::Error::from)?;
            if flags.contains(OFlags::NONBLOCK) {
                return Ok(None);
            }
            let mut p = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut p, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
    }
}

impl AsFd for Events {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Which open context each CQ, QP and SRQ of a device belongs to, so that each context's
/// `async_fd` reports its own objects' events only (two contexts of one device in one
/// process, as test suites open, each get theirs).
#[derive(Debug, Default)]
pub(crate) struct Owners {
    map: Mutex<HashMap<Source, Weak<Events>>>,
}

/// The object an asynchronous event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Cq(u32),
    Qp(u32),
    Srq(u32),
}

impl Source {
    fn of(e: &AsyncEvent) -> Source {
        match *e {
            AsyncEvent::Cq { cq, .. } => Source::Cq(cq),
            AsyncEvent::Qp { qpn, .. } => Source::Qp(qpn),
            AsyncEvent::Srq { srq, .. } => Source::Srq(srq),
        }
    }
}

impl Owners {
    /// `events` now receives the events of `src` (just created).
    pub fn claim(&self, src: Source, events: &Arc<Events>) {
        lock(&self.map).insert(src, Arc::downgrade(events));
    }

    /// `src` was destroyed.
    pub fn release(&self, src: Source) {
        lock(&self.map).remove(&src);
    }

    /// Hands `e` to the context that owns its object; an event whose object or context is
    /// gone is dropped, as a destroyed object's events are.
    pub fn deliver(&self, e: AsyncEvent) {
        let owner = lock(&self.map).get(&Source::of(&e)).and_then(Weak::upgrade);
        if let Some(events) = owner {
            events.push(e);
        }
    }
}
