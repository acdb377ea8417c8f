//! Completion queues and completion channels.

use crate::context::Context;
use crate::error::Result;
use oxrdma_core::WorkCompletion;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub struct CompletionQueue {
    pub(crate) ctx: Context,
    pub(crate) cq: u32,
    /// The CQ's entries, popped without the device lock.
    pub(crate) ring: Arc<oxrdma_core::CqRing>,
}

impl CompletionQueue {
    /// Appends up to `max` completions to `out`, oldest first; returns how many.
    ///
    /// Completions are taken without locking anything. When the queue is empty the calling
    /// thread moves packets itself before looking again, if no other thread is doing so,
    /// so a thread that busy-polls drives the device directly instead of competing with the
    /// engine thread for the CPU.
    pub fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        let before = out.len();
        while out.len() - before < max {
            match self.ring.pop() {
                Some(wc) => out.push(wc),
                None => break,
            }
        }
        if out.len() == before {
            // Another thread driving the device will bring the completions: no waiting.
            let shared = self.ctx.shared();
            if let Some(mut dev) = shared.try_lock() {
                shared.drive(&mut dev);
                // Also moves completions that overflowed the ring into it.
                out.extend(dev.engine.poll_cq(self.cq, max)?);
            } else {
                // Let the thread that drives run (cores may be fewer than threads).
                std::thread::yield_now();
            }
        }
        Ok(out.len() - before)
    }

    /// Asks for `channel` to become readable at the next completion (`ibv_req_notify_cq`).
    pub fn req_notify(&self, channel: &CompletionChannel) {
        let shared = self.ctx.shared();
        let mut armed = shared.armed();
        armed.push((self.cq, channel.fd.clone()));
        drop(armed);
        shared.ring();
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().engine.destroy_cq(self.cq);
    }
}

/// A file descriptor that becomes readable when an armed CQ has a completion.
#[derive(Debug)]
pub struct CompletionChannel {
    pub(crate) fd: Arc<OwnedFd>,
}

impl CompletionChannel {
    /// Waits up to `timeout` for an event; true if one came. Consumes it.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&*self.fd, PollFlags::IN)];
        // Too long to represent: wait without a limit.
        let ts = Timespec::try_from(timeout).ok();
        let n = poll(&mut fds, ts.as_ref()).map_err(std::io::Error::from)?;
        if n == 0 {
            return Ok(false);
        }
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&*self.fd, &mut b);
        Ok(true)
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
