//! Asynchronous events: `ibv_get_async_event` and `ibv_ack_async_event`, on the context's
//! `async_fd` (readable exactly while events wait). oxrdma's events name objects by
//! number; each context keeps the program's pointers by those numbers.

use crate::abi::*;
use crate::context::lookup;
use crate::context::Context;
use crate::errno::errno_of;
use crate::registry::Kind;
use oxrdma::AsyncEvent;
use std::ffi::{c_int, c_uint, c_void};

/// `ibv_get_async_event`: waits for the next event (unless `async_fd` was made
/// non-blocking: then -1 with EAGAIN) and names its object. Events of objects destroyed
/// since are skipped.
///
/// # Safety
/// `ctx` is NULL or open; `event` is NULL or writable.
pub(crate) unsafe extern "C" fn get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
        crate::errno::set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        crate::errno::set_errno(libc::EINVAL);
        return -1;
    }
    loop {
        let e = match c.ox.get_async_event() {
            Ok(Some(e)) => e,
            Ok(None) => {
                crate::errno::set_errno(libc::EAGAIN);
                return -1;
            }
            Err(e) => {
                crate::errno::set_errno(errno_of(&e));
                return -1;
            }
        };
        let (of, id, kind) = match e {
            AsyncEvent::Cq { cq, event } => (Kind::Cq, cq, event),
            AsyncEvent::Qp { qpn, event } => (Kind::Qp, qpn, event),
            AsyncEvent::Srq { srq, event } => (Kind::Srq, srq, event),
        };
        // SAFETY: `ctx` is open (checked above).
        let Some(p) = (unsafe { lookup(ctx, of, id) }) else {
            continue;
        };
        let out = ibv_async_event {
            element: ibv_async_event_element { cq: p },
            event_type: kind as c_uint,
        };
        // SAFETY: writable (caller's promise, not NULL). The union's members are all
        // pointers to the object, so writing it through `cq` names a QP or SRQ too.
        unsafe { event.write(out) };
        return 0;
    }
}

/// `ibv_ack_async_event`: nothing to release (destroying an object does not wait for
/// its events to be acknowledged).
///
/// # Safety
/// Any argument (not touched).
pub(crate) unsafe extern "C" fn ack_async_event(_event: *mut c_void) {}
