//! Event channels (`rdma_event_channel`). A device's CM events reach them by the routes of
//! `routes.rs`; the id behind an event is found when the application takes it
//! (`EngineChannel::get_event`), which also does what librdmacm does in
//! `rdma_get_cm_event` (the QP's RTR and RTS and the RTU on a REP, ERR on a rejection).

use super::state::ChannelInner;
use crate::error::Result;
use crate::fdqueue::FdQueue;
use crate::lock::lock;
use crate::shared::Shared;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, Weak};

/// An event channel of the engine's devices: `get_event` takes the next event of its
/// ids, and its descriptor is readable while one waits.
#[derive(Debug, Clone)]
pub(crate) struct EngineChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl EngineChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> Result<EngineChannel> {
        Ok(EngineChannel {
            inner: Arc::new(ChannelInner {
                queue: FdQueue::new()?,
                conns: Mutex::default(),
                listeners: Mutex::default(),
                devices: Mutex::default(),
            }),
        })
    }

    /// Moves events the devices hold into the channels (the engine threads do so as
    /// they go; this covers one that sleeps with events held).
    pub(super) fn pull(&self) {
        let devices: Vec<Arc<Shared>> = lock(&self.inner.devices)
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for shared in devices {
            drop(shared.try_lock());
        }
    }
}

impl AsFd for EngineChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.queue.as_fd()
    }
}

impl EngineChannel {
    /// Makes `get_event` return `Ok(None)` at once when no event waits (as `O_NONBLOCK`
    /// on the descriptor does), or wait again.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        crate::fdqueue::set_nonblocking(self.as_fd(), nonblocking)
    }

    /// The next event, waiting up to `timeout` for one (`Ok(None)`: none came).
    pub fn get_event_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<super::CmEvent>> {
        use rustix::event::{poll, PollFd, PollFlags};
        let start = std::time::Instant::now();
        loop {
            if let Some(e) = self.try_event() {
                return Ok(Some(e));
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            // Sliced, so events a sleeping device holds are pulled now and then.
            let slice = left.min(std::time::Duration::from_millis(10));
            let ts = rustix::time::Timespec::try_from(slice).unwrap_or_default();
            let mut fds = [PollFd::new(self, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
    }
}
