//! Event channels (`rdma_event_channel`) and how the devices' CM events reach them.
//!
//! A device's CM hands up events naming its comm IDs; whichever thread lets go of the
//! device moves them (`Shared::collect_events` → [`CmRoutes::deliver`]) to the channel of
//! the id that owns the comm ID, or of the listener a request is for. Nothing there
//! upgrades an id: the id behind an event is found when the application takes it
//! (`EngineChannel::get_event`), which also does what librdmacm does in
//! `rdma_get_cm_event` (the QP's RTR and RTS and the RTU on a REP, ERR on a rejection).

use super::state::{ChannelInner, Raw};
use crate::device::Device;
use crate::error::Result;
use crate::fdqueue::FdQueue;
use crate::lock::lock;
use crate::shared::Shared;
use oxrdma_core::cm::CmEventKind;
use std::collections::HashMap;
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

/// Which channel gets the events of each comm ID and listened service ID of a device.
#[derive(Debug, Default)]
pub(crate) struct CmRoutes {
    conns: Mutex<HashMap<u32, Weak<ChannelInner>>>,
    listeners: Mutex<HashMap<u64, Weak<ChannelInner>>>,
    /// The iWARP ids by their QP: told when its stream ends.
    iwarp: Mutex<HashMap<u32, Weak<dyn StreamEnded>>>,
}

/// What an iWARP id (`iwarp_id.rs`) is told when its connection's stream ends; called by
/// the thread that holds the device.
pub(crate) trait StreamEnded: Send + Sync + std::fmt::Debug {
    fn stream_ended(self: Arc<Self>);
}

impl CmRoutes {
    pub fn route_conn(&self, comm_id: u32, ch: &Arc<ChannelInner>) {
        lock(&self.conns).insert(comm_id, Arc::downgrade(ch));
    }
    pub fn route_listener(&self, service_id: u64, ch: &Arc<ChannelInner>) {
        lock(&self.listeners).insert(service_id, Arc::downgrade(ch));
    }
    pub fn unroute_conn(&self, comm_id: u32) {
        lock(&self.conns).remove(&comm_id);
    }
    pub fn unroute_listener(&self, service_id: u64) {
        lock(&self.listeners).remove(&service_id);
    }
    pub fn route_iwarp(&self, qpn: u32, id: Weak<dyn StreamEnded>) {
        lock(&self.iwarp).insert(qpn, id);
    }
    pub fn unroute_iwarp(&self, qpn: u32) {
        lock(&self.iwarp).remove(&qpn);
    }

    /// Moves the CM events of `dev` (key `key`) to their channels; a request for a
    /// listener that is gone is rejected, an event of an id that is gone dropped.
    pub fn deliver(&self, key: usize, dev: &mut Device) {
        let ended = dev.streams.as_mut().map(|s| s.take_ended());
        for qpn in ended.into_iter().flatten() {
            let id = lock(&self.iwarp).remove(&qpn).and_then(|w| w.upgrade());
            if let Some(id) = id {
                id.stream_ended();
            }
        }
        while let Some(event) = dev.engine.poll_cm_event() {
            let comm_id = event.id.0;
            let ch = match &event.kind {
                CmEventKind::ConnectRequest { req, .. } => {
                    self.for_request(comm_id, req.service_id)
                }
                CmEventKind::SidrRequest { req, .. } => self.for_request(comm_id, req.service_id),
                _ => lock(&self.conns).get(&comm_id).and_then(Weak::upgrade),
            };
            let last = matches!(
                event.kind,
                CmEventKind::Rejected { .. }
                    | CmEventKind::Unreachable
                    | CmEventKind::TimewaitExit
                    | CmEventKind::SidrReply { .. }
            );
            if last {
                self.unroute_conn(comm_id);
            }
            match ch {
                Some(ch) => ch.queue.push(Raw::Core { dev: key, event }),
                None => {
                    let now = dev.now();
                    dev.engine.cm_mut().destroy(now, event.id);
                }
            }
        }
    }

    /// The listener's channel for a new request, now also the request's.
    fn for_request(&self, comm_id: u32, service_id: u64) -> Option<Arc<ChannelInner>> {
        let ch = lock(&self.listeners)
            .get(&service_id)
            .and_then(Weak::upgrade)?;
        lock(&self.conns).insert(comm_id, Arc::downgrade(&ch));
        Some(ch)
    }
}
