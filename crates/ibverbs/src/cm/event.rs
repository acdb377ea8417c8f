//! `rdma_get_cm_event`, `rdma_ack_cm_event`, `rdma_event_str`, and the wait of a
//! synchronous id: each oxrdma event becomes the C event librdmacm would hand out, after
//! what librdmacm does on the way (a new id for a connection request; the QP's INIT, RTR
//! and RTS and the RTU on a REP; ERR on a rejection).

use super::abi::*;
use super::id::{by_key, fail, register, Chan, Id};
use crate::abi::ibv_gid;
use oxrdma::cm::{CmEvent, CmEventType};
use oxrdma::QpType;
use std::ffi::{c_char, c_int};

/// An event as handed to the program: its struct first, then the private data it points
/// into, and the id whose count of unacked events it is in.
#[repr(C)]
struct Ev {
    c: rdma_cm_event,
    data: [u8; 256],
    owner: *mut Id,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The next event on `chan` that `want` picks (others are kept for later takers, in
/// order). EAGAIN when the channel's descriptor is non-blocking and none waits.
fn next(chan: &Chan, want: &dyn Fn(&CmEvent) -> bool) -> Result<CmEvent, c_int> {
    {
        let mut parked = lock(&chan.parked);
        if let Some(i) = parked.iter().position(want) {
            return Ok(parked.remove(i).expect("the index just found"));
        }
    }
    loop {
        match chan.ox.get_event() {
            Ok(Some(e)) if want(&e) => return Ok(e),
            Ok(Some(e)) => lock(&chan.parked).push_back(e),
            Ok(None) => return Err(libc::EAGAIN),
            Err(e) => return Err(crate::errno::errno_of(&e)),
        }
    }
}

/// A new C id for a connection request to `listener`.
fn child(listener: &Id, e: &mut CmEvent) -> Option<*mut Id> {
    let ox = e.new_id.take()?;
    let lc = listener.c();
    let dev = lock(&listener.st).dev;
    // SAFETY: the listener is live (found by key); the new id is ours alone yet.
    let id = unsafe {
        let id = Id::alloc((*lc).channel, (*lc).context, (*lc).ps, (*lc).qp_type);
        let c = (*id).c();
        // The listener's device, even where the listener shows none (`hide_device`).
        (*c).verbs = dev.map_or((*lc).verbs, |d| d.verbs());
        (*c).pd = dev.map_or((*lc).pd, |d| d.pd());
        (*c).port_num = 1;
        id
    };
    // SAFETY: just made.
    let new = unsafe { &*id };
    {
        let mut st = lock(&new.st);
        st.dev = dev;
        st.sync = lock(&listener.st).sync;
        st.ox = Some(ox.clone());
    }
    register(ox.key().0, id);
    new.write_route(&ox);
    Some(id)
}

/// librdmacm's part of event `e` for its id, and the C event; None if the event is for an
/// id that is gone, or one librdmacm does not show.
fn convert(mut e: CmEvent) -> Option<*mut rdma_cm_event> {
    let (id_ptr, owner) = if e.event == CmEventType::ConnectRequest {
        let listener = by_key(e.listen_id?.0)?;
        // SAFETY: registered ids are live.
        let new = child(unsafe { &*listener }, &mut e)?;
        (new, listener)
    } else {
        let id = by_key(e.id.0)?;
        (id, id)
    };
    // SAFETY: registered ids are live (an id leaves the registry before it is freed).
    let id = unsafe { &*id_ptr };
    let ox = id.ox().ok()?;
    // The id moved the program's QP on the way (a REP: RTR, RTS and the RTU, or
    // CONNECT_ERROR; a rejection: ERR), as librdmacm does (`oxrdma::cm::steps`).
    let (event, status) = (e.event, e.status);
    if matches!(
        event,
        CmEventType::AddrResolved | CmEventType::RouteResolved | CmEventType::Established
    ) {
        id.write_route(&ox);
    }
    let listen_id = if e.event == CmEventType::ConnectRequest {
        // SAFETY: the listener is live.
        unsafe { (*owner).c() }
    } else {
        std::ptr::null_mut()
    };
    let mut ev = Box::new(Ev {
        c: rdma_cm_event {
            id: id.c(),
            listen_id,
            event: event as u32,
            status,
            param: rdma_cm_event_param {
                conn: rdma_conn_param {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                },
            },
        },
        data: [0; 256],
        owner,
    });
    // The box does not move: the event's private data points into it.
    let data_ptr = ev.data.as_ptr().cast();
    let ud = id.qp_type() == QpType::Ud;
    match (&e.ud, ud) {
        (Some(u), true) => {
            let n = u.private_data.len().min(255);
            ev.data[..n].copy_from_slice(&u.private_data[..n]);
            let mut ah = crate::abi::ibv_ah_attr {
                is_global: 1,
                port_num: 1,
                ..Default::default()
            };
            ah.grh.dgid = ibv_gid { raw: u.dgid.0 };
            ah.grh.sgid_index = id.ox().map_or(0, |o| o.local_gid().1);
            ah.grh.hop_limit = 64;
            ev.c.param.ud = rdma_ud_param {
                private_data: if n > 0 { data_ptr } else { std::ptr::null() },
                private_data_len: n as u8,
                ah_attr: ah,
                qp_num: u.qp_num,
                qkey: u.qkey,
            };
        }
        _ => {
            let c = &e.conn;
            let n = c.private_data.len().min(255);
            ev.data[..n].copy_from_slice(&c.private_data[..n]);
            ev.c.param.conn = rdma_conn_param {
                private_data: if n > 0 { data_ptr } else { std::ptr::null() },
                private_data_len: n as u8,
                responder_resources: c.responder_resources,
                initiator_depth: c.initiator_depth,
                flow_control: u8::from(c.flow_control),
                retry_count: c.retry_count,
                rnr_retry_count: c.rnr_retry_count,
                srq: u8::from(c.srq),
                qp_num: c.qp_num,
            };
        }
    }
    // SAFETY: the owner is live.
    *lock(unsafe { &(*owner).unacked }) += 1;
    Some(Box::into_raw(ev).cast())
}

/// `rdma_get_cm_event`.
///
/// # Safety
/// `ch` NULL or a live channel; `evp` writable.
pub(crate) unsafe extern "C" fn get_cm_event(
    ch: *mut rdma_event_channel,
    evp: *mut *mut rdma_cm_event,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(chan) = (unsafe { Chan::enter(ch) }) else {
        return fail(libc::EINVAL);
    };
    if evp.is_null() {
        return fail(libc::EINVAL);
    }
    loop {
        match next(&chan, &|_| true) {
            Ok(e) => {
                if let Some(ev) = convert(e) {
                    // SAFETY: the caller's promise.
                    unsafe { *evp = ev };
                    return 0;
                }
            }
            Err(e) => return fail(e),
        }
    }
}

/// `rdma_ack_cm_event`.
///
/// # Safety
/// `ev` NULL or an event this library handed out, not acked before.
pub(crate) unsafe extern "C" fn ack_cm_event(ev: *mut rdma_cm_event) -> c_int {
    if ev.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's promise: it came from `convert`.
    let ev = unsafe { Box::from_raw(ev.cast::<Ev>()) };
    // SAFETY: an id waits in `rdma_destroy_id` for its events, so the owner is live.
    let owner = unsafe { &*ev.owner };
    let mut n = lock(&owner.unacked);
    *n = n.saturating_sub(1);
    owner.acked.notify_all();
    0
}

/// A synchronous id's wait for the event its call brings (librdmacm's `ucma_complete`):
/// kept in `id->event`; a failure status becomes the call's errno.
pub fn complete(id: &Id) -> Result<(), c_int> {
    if !lock(&id.st).sync {
        return Ok(());
    }
    let c = id.c();
    // SAFETY: the id is live; `event` is the library's to manage for a synchronous id.
    let old = unsafe { std::mem::replace(&mut (*c).event, std::ptr::null_mut()) };
    if !old.is_null() {
        // SAFETY: the id's previous event, handed out by this library.
        unsafe { ack_cm_event(old) };
    }
    let key = id.ox()?.key();
    let chan = id.chan().ok_or(libc::EINVAL)?;
    let ev = loop {
        let e = next(chan, &|e: &CmEvent| e.id == key)?;
        if let Some(ev) = convert(e) {
            break ev;
        }
    };
    // SAFETY: as above.
    unsafe { (*c).event = ev };
    // SAFETY: just made by `convert`.
    let e = unsafe { &*ev };
    match e.status {
        0 => Ok(()),
        _ if e.event == CmEventType::Rejected as u32 => Err(libc::ECONNREFUSED),
        s if s < 0 => Err(-s),
        s => Err(s),
    }
}

/// The next connection request of a synchronous listener (`rdma_get_request`).
pub fn next_request(listener: &Id) -> Result<*mut rdma_cm_event, c_int> {
    let key = listener.ox()?.key();
    let chan = listener.chan().ok_or(libc::EINVAL)?;
    loop {
        let e = next(chan, &|e: &CmEvent| e.listen_id == Some(key) || e.id == key)?;
        if let Some(ev) = convert(e) {
            return Ok(ev);
        }
    }
}

/// `rdma_event_str`.
pub(crate) extern "C" fn event_str(event: u32) -> *const c_char {
    let s: &'static std::ffi::CStr = match event {
        0 => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        1 => c"RDMA_CM_EVENT_ADDR_ERROR",
        2 => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        3 => c"RDMA_CM_EVENT_ROUTE_ERROR",
        4 => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        5 => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        6 => c"RDMA_CM_EVENT_CONNECT_ERROR",
        7 => c"RDMA_CM_EVENT_UNREACHABLE",
        8 => c"RDMA_CM_EVENT_REJECTED",
        9 => c"RDMA_CM_EVENT_ESTABLISHED",
        10 => c"RDMA_CM_EVENT_DISCONNECTED",
        11 => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        12 => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        13 => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        14 => c"RDMA_CM_EVENT_ADDR_CHANGE",
        15 => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}
