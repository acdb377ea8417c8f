//! A queue of events with a file descriptor that is readable exactly while it holds some,
//! for poll, epoll or an async runtime: a context's asynchronous events
//! (`ibv_context.async_fd`) and an RDMA CM event channel (`rdma_event_channel.fd`).

use crate::error::Result;
use crate::lock::lock;
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::fs::{fcntl_getfl, OFlags};
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
pub(crate) struct FdQueue<T> {
    queue: Mutex<VecDeque<T>>,
    /// Counts 1 while `queue` has events, 0 while it is empty (changed under its lock).
    fd: OwnedFd,
}

impl<T> FdQueue<T> {
    pub fn new() -> Result<FdQueue<T>> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC).map_err(std::io::Error::from)?;
        Ok(FdQueue {
            queue: Mutex::new(VecDeque::new()),
            fd,
        })
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<T>> {
        lock(&self.queue)
    }

    pub fn push(&self, e: T) {
        let mut q = self.queue();
        if q.is_empty() {
            // An eventfd write only fails at a count near 2^64.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
        q.push_back(e);
    }

    /// Takes out every event `which` picks, in order.
    pub fn take_where(&self, mut which: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut q = self.queue();
        let was = q.len();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(was);
        for e in q.drain(..) {
            if which(&e) {
                taken.push(e);
            } else {
                kept.push_back(e);
            }
        }
        *q = kept;
        if was > 0 && q.is_empty() {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.fd, &mut b);
        }
        taken
    }

    /// The oldest event, if any.
    pub fn pop(&self) -> Option<T> {
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
    /// (then `None` at once, as `ibv_get_async_event` and `rdma_get_cm_event` answer
    /// EAGAIN).
    pub fn wait(&self) -> Result<Option<T>> {
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

impl<T> AsFd for FdQueue<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Sets or clears `O_NONBLOCK` on `fd` (an event channel's or a completion channel's).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, nonblocking: bool) -> Result<()> {
    let flags = fcntl_getfl(fd).map_err(std::io::Error::from)?;
    let flags = if nonblocking {
        flags | OFlags::NONBLOCK
    } else {
        flags - OFlags::NONBLOCK
    };
    rustix::fs::fcntl_setfl(fd, flags).map_err(std::io::Error::from)?;
    Ok(())
}
