//! What a QP works with while it handles an event: the engine's tables it may touch,
//! borrowed field by field, and the time.

use crate::cq::Cq;
use crate::drops::{RxDrop, RxDrops};
use crate::keys::MrTable;
use crate::verbs::{AsyncEvent, EventType};
use crate::wr::WorkCompletion;
use crate::Nanos;
use std::collections::{BTreeMap, VecDeque};

/// What a QP needs from the rest of the engine while it processes an event.
pub(crate) struct Ctx<'a> {
    pub now: Nanos,
    pub mrs: &'a mut MrTable,
    pub cqs: &'a mut BTreeMap<u32, Cq>,
    pub srqs: &'a mut BTreeMap<u32, crate::srq::Srq>,
    pub events: &'a mut VecDeque<AsyncEvent>,
    pub drops: &'a mut RxDrops,
    pub limits: &'a crate::limits::PeerLimits,
    /// Whether an application thread polls and so serves the engine's timers
    /// (`Engine::set_app_serves_timers`).
    pub app_serves_timers: bool,
}

impl Ctx<'_> {
    /// Counts a received packet that is not acted on.
    pub fn drop_packet(&mut self, why: RxDrop) {
        self.drops.count(why);
    }

    pub fn complete(&mut self, cq: u32, wc: WorkCompletion) {
        complete_on(self.cqs, self.events, cq, wc);
    }
}

/// A completion on CQ `cq`; one that overflows it is the CQ's error event.
pub(crate) fn complete_on(
    cqs: &mut BTreeMap<u32, Cq>,
    events: &mut VecDeque<AsyncEvent>,
    cq: u32,
    wc: WorkCompletion,
) {
    if let Some(c) = cqs.get_mut(&cq) {
        if c.push(wc) {
            events.push_back(AsyncEvent::Cq {
                cq,
                event: EventType::CqErr,
            });
        }
    }
}
