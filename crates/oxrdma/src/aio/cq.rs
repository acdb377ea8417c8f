//! A completion queue whose completions are awaited.

use super::Fd;
use crate::error::Result;
use crate::{CompletionChannel, CompletionQueue};
use oxrdma_core::WorkCompletion;
use std::os::fd::AsRawFd;
use tokio::io::unix::AsyncFd;

/// A CQ with a completion channel of its own, armed whenever a task finds it empty.
#[derive(Debug)]
pub struct AsyncCq {
    // Dropped first: the reactor lets the descriptor go before the channel closes it.
    fd: AsyncFd<Fd>,
    channel: CompletionChannel,
    cq: CompletionQueue,
}

impl AsyncCq {
    /// `cq`, its completions to be awaited (within a tokio runtime). A CQ is armed for
    /// one channel at a time: do not arm this one for another.
    pub fn new(cq: CompletionQueue) -> Result<AsyncCq> {
        let engine = cq
            .engine_cq()
            .ok_or(crate::Error::Unsupported("awaiting an rdma-core CQ"))?;
        let channel = engine.ctx.create_comp_channel()?;
        channel.set_nonblocking(true)?;
        // SAFETY: `channel` owns the descriptor and is dropped after `fd` (field order).
        let fd = unsafe { super::register(channel.as_raw_fd()) }?;
        Ok(AsyncCq { fd, channel, cq })
    }

    /// The CQ, for what does not wait.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// Appends up to `max` completions to `out` once at least one is there; returns how
    /// many.
    pub async fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        loop {
            let n = self.cq.poll(out, max)?;
            if n > 0 || max == 0 {
                return Ok(n);
            }
            self.cq.req_notify(&self.channel)?;
            // What came before the arm raises no event: look once more.
            let n = self.cq.poll(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            // This task will not poll again until woken: the engine thread must move the
            // packets meanwhile (an empty poll told it the program polls on).
            if let Some(cq) = self.cq.engine_cq() {
                cq.ctx.shared().app_leaves();
            }
            let mut ready = self.fd.readable().await?;
            while self.channel.try_get_event()?.is_some() {}
            ready.clear_ready();
        }
    }

    /// The next completion.
    pub async fn next(&self) -> Result<WorkCompletion> {
        let mut out = Vec::with_capacity(1);
        while out.is_empty() {
            self.poll(&mut out, 1).await?;
        }
        Ok(out.remove(0))
    }
}
