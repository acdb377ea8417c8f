//! Completion channels as the program sees them: an engine device's (`channel.rs`) or one
//! shared by rdma-core CQs (`rdma_core/comp_channel.rs`).

use crate::channel::{ChannelStats, EngineCompChannel};
use crate::error::Result;
use crate::rdma_core;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// A file descriptor that becomes readable when an armed CQ has a completion
/// (`ibv_comp_channel`). Taking an event blocks unless the channel is made non-blocking.
/// CQs are armed for it with [`crate::CompletionQueue::req_notify`], any number of them,
/// of its device (or, on rdma-core, of any device).
///
/// ```
/// use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendWr};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.20".parse().unwrap())?,
///               Context::open("127.0.1.21".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let mb = pb.register(64, Access::LOCAL_WRITE)?;
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
/// let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
/// qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
/// qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
/// // b sleeps on its channel until a completion comes to the CQ it armed.
/// let channel = b.create_comp_channel()?;
/// cb.req_notify(&channel)?;
/// qb.post_recv(RecvWr { wr_id: 7, sges: vec![mb.sge(0, 64)?].into() })?;
/// qa.post_send(SendWr::send_inline(1, b"wake up"))?;
/// assert!(channel.wait(Duration::from_secs(10))?, "no event");
/// // The event says only that there is something: the completions are polled.
/// let mut wcs = Vec::new();
/// assert_eq!(cb.poll(&mut wcs, 8)?, 1);
/// assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (7, 7));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct CompletionChannel {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Engine(EngineCompChannel),
    RdmaCore(rdma_core::CompChannel),
}

impl CompletionChannel {
    pub(crate) fn engine(channel: EngineCompChannel) -> CompletionChannel {
        CompletionChannel {
            kind: Kind::Engine(channel),
        }
    }

    pub(crate) fn rdma_core() -> Result<CompletionChannel> {
        Ok(CompletionChannel {
            kind: Kind::RdmaCore(rdma_core::CompChannel::new()?),
        })
    }

    pub(crate) fn engine_channel(&self) -> Option<&EngineCompChannel> {
        match &self.kind {
            Kind::Engine(c) => Some(c),
            Kind::RdmaCore(_) => None,
        }
    }

    pub(crate) fn rdma_core_channel(&self) -> Option<&rdma_core::CompChannel> {
        match &self.kind {
            Kind::Engine(_) => None,
            Kind::RdmaCore(c) => Some(c),
        }
    }

    /// Waits up to `timeout` for an event; true if one came. Consumes it.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        match &self.kind {
            Kind::Engine(c) => c.wait(timeout),
            Kind::RdmaCore(c) => Ok(c.next(Some(timeout))?.is_some()),
        }
    }

    /// Takes the next event (`ibv_get_cq_event`): the handle of the CQ it is for
    /// ([`crate::CompletionQueue::handle`]). Blocks while none waits, unless the channel
    /// is non-blocking (then `Ok(None)`).
    pub fn get_event(&self) -> Result<Option<u32>> {
        match &self.kind {
            Kind::Engine(c) => c.get_event(),
            Kind::RdmaCore(c) => c.next(c.is_nonblocking().then_some(Duration::ZERO)),
        }
    }

    /// The next event if one waits (the handle of its CQ), without waiting.
    pub fn try_get_event(&self) -> Result<Option<u32>> {
        match &self.kind {
            Kind::Engine(c) => c.try_get_event(),
            Kind::RdmaCore(c) => c.next(Some(Duration::ZERO)),
        }
    }

    /// Makes [`Self::get_event`] return `Ok(None)` at once when no event waits (as
    /// `O_NONBLOCK` on the descriptor does), or wait again.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        match &self.kind {
            Kind::Engine(c) => c.set_nonblocking(nonblocking),
            Kind::RdmaCore(c) => {
                c.set_nonblocking(nonblocking);
                Ok(())
            }
        }
    }

    /// What the threads waiting on this channel did so far (an engine device's; zero on
    /// rdma-core, where the NIC moves the packets).
    pub fn stats(&self) -> ChannelStats {
        match &self.kind {
            Kind::Engine(c) => c.stats(),
            Kind::RdmaCore(_) => ChannelStats::default(),
        }
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.kind {
            Kind::Engine(c) => c.as_fd(),
            Kind::RdmaCore(c) => c.fd(),
        }
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
