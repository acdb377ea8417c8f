//! How a device's CM events reach the event channels. A device's CM hands up events
//! naming its comm IDs; whichever thread lets go of the device moves them
//! (`Shared::collect_events` → [`CmRoutes::deliver`]) to the channel of the id that owns
//! the comm ID, or of the listener a request is for. The routes live in each device's
//! `Shared`, below the channels and ids that hold devices, so they know a channel only as
//! somewhere to queue events ([`EventSink`]) and an iWARP id only as something to tell
//! that its stream ended ([`StreamEnded`]).

use crate::device::Device;
use crate::lock::lock;
use oxrdma_core::cm::{CmEvent, CmEventKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// An event channel, as the routes see it; called by the thread that holds the device.
pub(crate) trait EventSink: Send + Sync + std::fmt::Debug {
    /// Queues `event` of the CM of device `dev` (the device's key).
    fn queue_core(&self, dev: usize, event: CmEvent);
}

/// What an iWARP id (`iwarp_id.rs`) is told when its connection's stream ends; called by
/// the thread that holds the device.
pub(crate) trait StreamEnded: Send + Sync + std::fmt::Debug {
    fn stream_ended(self: Arc<Self>);
}

/// Which channel gets the events of each comm ID and listened service ID of a device.
#[derive(Debug, Default)]
pub(crate) struct CmRoutes {
    conns: Mutex<HashMap<u32, Weak<dyn EventSink>>>,
    listeners: Mutex<HashMap<u64, Weak<dyn EventSink>>>,
    /// The iWARP ids by their QP: told when its stream ends.
    iwarp: Mutex<HashMap<u32, Weak<dyn StreamEnded>>>,
}

impl CmRoutes {
    pub fn route_conn<S: EventSink + 'static>(&self, comm_id: u32, ch: &Arc<S>) {
        let ch: Weak<dyn EventSink> = Arc::downgrade(ch) as Weak<S>;
        lock(&self.conns).insert(comm_id, ch);
    }
    pub fn route_listener<S: EventSink + 'static>(&self, service_id: u64, ch: &Arc<S>) {
        let ch: Weak<dyn EventSink> = Arc::downgrade(ch) as Weak<S>;
        lock(&self.listeners).insert(service_id, ch);
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
                Some(ch) => ch.queue_core(key, event),
                None => {
                    let now = dev.now();
                    dev.engine.cm_mut().destroy(now, event.id);
                }
            }
        }
    }

    /// The listener's channel for a new request, now also the request's.
    fn for_request(&self, comm_id: u32, service_id: u64) -> Option<Arc<dyn EventSink>> {
        let ch = lock(&self.listeners)
            .get(&service_id)
            .and_then(Weak::upgrade)?;
        lock(&self.conns).insert(comm_id, Arc::downgrade(&ch));
        Some(ch)
    }
}
