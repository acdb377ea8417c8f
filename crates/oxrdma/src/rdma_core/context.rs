//! An open rdma-core device as the API's `Context` holds it: the device, what the API
//! keeps beside it, and the device's asynchronous events.

use super::verbs::{done_or_would_block, verbs};
use super::{Ahs, Device};
use crate::error::Result;
use oxrdma_core::{AsyncEvent, EventType};
use oxrdma_verbs_abi::ibv_async_event;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub(crate) struct RdmaCoreContext {
    pub dev: Arc<Device>,
    /// Address handles by the id `UdDest` names.
    pub ahs: Mutex<Ahs>,
}

impl RdmaCoreContext {
    pub fn new(dev: Device) -> Result<RdmaCoreContext> {
        Ok(RdmaCoreContext {
            dev: Arc::new(dev),
            ahs: Mutex::default(),
        })
    }

    /// A random 24-bit PSN from the OS's CSPRNG.
    pub fn random_psn(&self) -> u32 {
        crate::secure::random_u32() & 0xff_ffff
    }

    /// The context's `async_fd`: readable while asynchronous events wait.
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the context is open while the device is; its descriptor lives as long.
        unsafe { BorrowedFd::borrow_raw((*self.dev.ctx()).async_fd) }
    }

    /// The next asynchronous event about an object the API names (a CQ, QP or SRQ),
    /// waiting for one unless `async_fd` is non-blocking (`Ok(None)` then when none
    /// waits). Port and device events, which name no such object, are taken and passed
    /// over.
    pub fn get_async_event(&self) -> Result<Option<AsyncEvent>> {
        let v = verbs()?;
        loop {
            let mut ev = std::mem::MaybeUninit::<ibv_async_event>::uninit();
            // SAFETY: an open context; `ev` is written on success.
            let rc = unsafe { (v.ibv_get_async_event)(self.dev.ctx(), ev.as_mut_ptr()) };
            if !done_or_would_block("ibv_get_async_event", rc)? {
                return Ok(None);
            }
            // SAFETY: written by the call that succeeded.
            let mut ev = unsafe { ev.assume_init() };
            // SAFETY: the element is the member the event type names, and the object it
            // points at lives until the event is acknowledged.
            let event = unsafe { convert(&ev) };
            // SAFETY: acknowledged once (the object's destruction waits for that).
            unsafe { (v.ibv_ack_async_event)(&mut ev) };
            if event.is_some() {
                return Ok(event);
            }
        }
    }

    /// The next asynchronous event if one waits.
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let fd = self.async_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let now = Timespec::default();
        while poll(&mut fds, Some(&now)).ok()? > 0 {
            // Readable: the call does not block (an event of no object: look again).
            if let Some(e) = self.get_async_event().ok()? {
                return Some(e);
            }
        }
        None
    }
}

/// `ev` as the API's event; None for events about no CQ, QP or SRQ.
///
/// # Safety
/// `ev` is an event not yet acknowledged.
unsafe fn convert(ev: &ibv_async_event) -> Option<AsyncEvent> {
    let n = ev.event_type;
    let event = [
        EventType::CqErr,
        EventType::QpFatal,
        EventType::QpReqErr,
        EventType::QpAccessErr,
        EventType::CommEst,
        EventType::SqDrained,
        EventType::SrqLimitReached,
        EventType::QpLastWqeReached,
    ]
    .into_iter()
    .find(|e| *e as u32 == n)?;
    // SAFETY: the caller's promise: the member the type names points at a live object.
    unsafe {
        Some(match event {
            EventType::CqErr => AsyncEvent::Cq {
                cq: (*ev.element.cq).handle,
                event,
            },
            EventType::SrqLimitReached => AsyncEvent::Srq {
                srq: (*ev.element.srq).handle,
                event,
            },
            _ => AsyncEvent::Qp {
                qpn: (*ev.element.qp).qp_num,
                event,
            },
        })
    }
}
