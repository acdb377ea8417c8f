//! Completion queues and completion channels.

use crate::context::Context;
use crate::error::Result;
use oxrdma_core::WorkCompletion;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug)]
pub struct CompletionQueue {
    pub(crate) ctx: Context,
    pub(crate) cq: u32,
    /// The CQ's entries, popped without the device lock.
    pub(crate) ring: Arc<oxrdma_core::CqRing>,
    /// Cleared by `try_destroy` once the engine has let the CQ go.
    pub(crate) live: bool,
}

impl CompletionQueue {
    /// The CQ's handle, as [`CompletionChannel::get_event`] names it.
    pub fn handle(&self) -> u32 {
        self.cq
    }

    /// Appends up to `max` completions to `out`, oldest first; returns how many.
    pub fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        self.poll_each(max, |wc| out.push(wc))
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many.
    ///
    /// Completions are taken without locking anything. When the queue is empty the calling
    /// thread moves packets itself before looking again, if no other thread is doing so,
    /// so a thread that busy-polls drives the device directly instead of competing with the
    /// engine thread for the CPU.
    pub fn poll_each(&self, max: usize, mut f: impl FnMut(WorkCompletion)) -> Result<usize> {
        let mut n = 0;
        while n < max {
            match self.ring.pop() {
                Some(wc) => f(wc),
                None => break,
            }
            n += 1;
        }
        if n == 0 && max > 0 {
            // Another thread driving the device will bring the completions: no waiting.
            let shared = self.ctx.shared();
            if let Some(mut dev) = shared.try_lock() {
                shared.drive(&mut dev);
                // Also moves completions that overflowed the ring into it.
                for wc in dev.engine.poll_cq(self.cq, max)? {
                    f(wc);
                    n += 1;
                }
            } else {
                // Let the thread that drives run (cores may be fewer than threads).
                std::thread::yield_now();
            }
        }
        self.ctx.shared().polled(n);
        Ok(n)
    }

    /// Asks for `channel` to report this CQ at its next completion (`ibv_req_notify_cq`).
    pub fn req_notify(&self, channel: &CompletionChannel) {
        let shared = self.ctx.shared();
        let mut armed = shared.armed();
        armed.push((self.cq, channel.inner.clone()));
        drop(armed);
        shared.ring();
    }
}

crate::destroy::destroy_with! {
    /// `ibv_destroy_cq`: busy while a QP uses it.
    CompletionQueue.cq => destroy_cq;
}

/// What an armed CQ reports to: a counting file descriptor (one count per event, so
/// `poll` says readable exactly while events wait) and which CQs the events are for.
#[derive(Debug)]
pub(crate) struct ChannelInner {
    fd: OwnedFd,
    fired: Mutex<VecDeque<u32>>,
}

impl ChannelInner {
    /// Reports one event of `cq` (called by the engine thread).
    pub fn notify(&self, cq: u32) {
        self.fired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(cq);
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }
}

/// A file descriptor that becomes readable when an armed CQ has a completion
/// (`ibv_comp_channel`). Its reads block unless the descriptor is made non-blocking.
#[derive(Debug)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompletionChannel {
    pub(crate) fn new() -> Result<Self> {
        use rustix::event::{eventfd, EventfdFlags};
        // SEMAPHORE: each read takes one event, so the count matches `fired`.
        let fd = eventfd(0, EventfdFlags::SEMAPHORE | EventfdFlags::CLOEXEC)
            .map_err(std::io::Error::from)?;
        Ok(CompletionChannel {
            inner: Arc::new(ChannelInner {
                fd,
                fired: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// Waits up to `timeout` for an event; true if one came. Consumes it.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.inner.fd, PollFlags::IN)];
        // Too long to represent: wait without a limit.
        let ts = Timespec::try_from(timeout).ok();
        let n = poll(&mut fds, ts.as_ref()).map_err(std::io::Error::from)?;
        if n == 0 {
            return Ok(false);
        }
        Ok(self.get_event()?.is_some())
    }

    /// Takes the next event (`ibv_get_cq_event`): the handle of the CQ it is for. Blocks
    /// while none waits, unless the descriptor is non-blocking (then `Ok(None)`).
    pub fn get_event(&self) -> Result<Option<u32>> {
        let mut b = [0u8; 8];
        match rustix::io::read(&self.inner.fd, &mut b) {
            Ok(_) => {}
            Err(rustix::io::Errno::AGAIN) => return Ok(None),
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
        let cq = self
            .inner
            .fired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        Ok(cq)
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}
