//! Completion channels: a descriptor that becomes readable when an armed CQ gets a
//! completion (`ibv_comp_channel`).

use crate::error::Result;
use crate::lock::lock;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        lock(&self.fired).push_back(cq);
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
        let cq = lock(&self.inner.fired).pop_front();
        Ok(cq)
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}
