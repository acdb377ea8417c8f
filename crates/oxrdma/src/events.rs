//! A device's asynchronous events (`ibv_get_async_event`): the engine's events, moved here
//! whenever a thread lets go of the device, and a file descriptor that is readable exactly
//! while some wait (`ibv_context.async_fd`), for poll, epoll or an async runtime. Each
//! open context of a device has its own queue and descriptor (`Owners` routes events).

use crate::fdqueue::FdQueue;
use crate::lock::lock;
use oxrdma_core::AsyncEvent;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// A context's asynchronous events.
pub(crate) type Events = FdQueue<AsyncEvent>;

/// Which open context each CQ, QP and SRQ of a device belongs to, so that each context's
/// `async_fd` reports its own objects' events only (two contexts of one device in one
/// process, as test suites open, each get theirs).
#[derive(Debug, Default)]
pub(crate) struct Owners {
    map: Mutex<HashMap<Source, Weak<Events>>>,
}

/// The object an asynchronous event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Cq(u32),
    Qp(u32),
    Srq(u32),
}

impl Source {
    fn of(e: &AsyncEvent) -> Source {
        match *e {
            AsyncEvent::Cq { cq, .. } => Source::Cq(cq),
            AsyncEvent::Qp { qpn, .. } => Source::Qp(qpn),
            AsyncEvent::Srq { srq, .. } => Source::Srq(srq),
        }
    }
}

impl Owners {
    /// `events` now receives the events of `src` (just created).
    pub fn claim(&self, src: Source, events: &Arc<Events>) {
        lock(&self.map).insert(src, Arc::downgrade(events));
    }

    /// `src` was destroyed.
    pub fn release(&self, src: Source) {
        lock(&self.map).remove(&src);
    }

    /// Hands `e` to the context that owns its object; an event whose object or context is
    /// gone is dropped, as a destroyed object's events are.
    pub fn deliver(&self, e: AsyncEvent) {
        let owner = lock(&self.map).get(&Source::of(&e)).and_then(Weak::upgrade);
        if let Some(events) = owner {
            events.push(e);
        }
    }
}
