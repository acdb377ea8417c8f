//! An RDMA CM event channel whose events are awaited.

use super::Fd;
use crate::cm::{CmEvent, EventChannel};
use crate::error::Result;
use std::os::fd::AsRawFd;
use tokio::io::unix::AsyncFd;

/// An event channel (its descriptor is readable exactly while events wait).
#[derive(Debug)]
pub struct AsyncEventChannel {
    fd: AsyncFd<Fd>,
    channel: EventChannel,
}

impl AsyncEventChannel {
    /// `channel`, its events to be awaited (within a tokio runtime).
    pub fn new(channel: EventChannel) -> Result<AsyncEventChannel> {
        channel.set_nonblocking(true)?;
        // SAFETY: `channel` owns the descriptor and is dropped after `fd` (field order).
        let fd = unsafe { super::register(channel.as_raw_fd()) }?;
        Ok(AsyncEventChannel { fd, channel })
    }

    /// The channel, for the ids made on it.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// The next event.
    pub async fn next(&self) -> Result<CmEvent> {
        loop {
            if let Some(e) = self.channel.try_event() {
                return Ok(e);
            }
            let mut ready = self.fd.readable().await?;
            if let Some(e) = self.channel.try_event() {
                return Ok(e);
            }
            ready.clear_ready();
        }
    }
}
