//! The calls on ids and channels: create, destroy, bind, resolve, listen, connect, accept,
//! reject, disconnect, establish. Each does what librdmacm does around the kernel's CM: it
//! moves the program's QP (RTR and RTS on accept, ERR on disconnect), and a synchronous id
//! (no channel given) waits for the call's event (`event::complete`).

use super::abi::*;
use super::event::{ack_cm_event, complete};
use super::id::{fail, unregister, Chan, Id};
use super::sockaddr;
use crate::errno::{errno_of, set_errno};
use oxrdma::cm::{ConnParam, PortSpace};
use oxrdma::QpType;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `rdma_create_event_channel`.
pub(crate) extern "C" fn create_event_channel() -> *mut rdma_event_channel {
    if !super::devices::any() {
        // What librdmacm's examples read as "No RDMA devices were detected".
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    }
    match Chan::new() {
        Ok(c) => c.cast(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `rdma_destroy_event_channel`: a channel destroyed twice, or not ours, is left alone.
///
/// # Safety
/// `ch` is anything; only a live channel is touched.
pub(crate) unsafe extern "C" fn destroy_event_channel(ch: *mut rdma_event_channel) {
    // SAFETY: `destroy` touches only a live channel.
    unsafe { Chan::destroy(ch.cast()) };
}

/// `rdma_create_id`: RDMA_PS_UDP and IPOIB ids are UD, the rest RC; with no channel the
/// id is synchronous.
///
/// # Safety
/// `ch` is NULL or ours; `idp` is writable.
pub(crate) unsafe extern "C" fn create_id(
    ch: *mut rdma_event_channel,
    idp: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    let qp_type = if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB {
        4
    } else {
        2
    };
    // SAFETY: the caller's promise.
    unsafe { create_id_typed(ch, idp, context, ps, qp_type) }
}

/// `rdma_create_id` with a QP type (also `rdma_create_ep`'s).
///
/// # Safety
/// As `create_id`.
pub(crate) unsafe fn create_id_typed(
    ch: *mut rdma_event_channel,
    idp: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> c_int {
    if idp.is_null() || PortSpace::from_value(ps as u16).is_none() {
        return fail(libc::EINVAL);
    }
    let (chan, sync) = if ch.is_null() {
        match Chan::new() {
            Ok(c) => (c.cast::<rdma_event_channel>(), true),
            Err(e) => return fail(e),
        }
    } else {
        (ch, false)
    };
    let id = Id::alloc(chan, context, ps, qp_type);
    // SAFETY: just made.
    let st = unsafe { &(*id).st };
    let mut s = lock(st);
    s.sync = sync;
    s.own_chan = if sync { chan as usize } else { 0 };
    drop(s);
    // SAFETY: the caller's promise.
    unsafe { *idp = id.cast() };
    0
}

/// `rdma_destroy_id`: waits until every event handed out for it is acked.
///
/// # Safety
/// `id` is any pointer: only a live id is touched.
pub(crate) unsafe extern "C" fn destroy_id(idp: *mut rdma_cm_id) -> c_int {
    // SAFETY: no other call destroys it meanwhile (`take` made it not live).
    let Some(id) = (unsafe { Id::take(idp) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the id is live.
    let ev = unsafe { std::mem::replace(&mut (*id.c()).event, std::ptr::null_mut()) };
    if !ev.is_null() {
        // SAFETY: an event this library handed out for the id.
        unsafe { ack_cm_event(ev) };
    }
    let mut n = lock(&id.unacked);
    while *n > 0 {
        n = id.acked.wait(n).unwrap_or_else(|p| p.into_inner());
    }
    drop(n);
    let st = std::mem::take(&mut *lock(&id.st));
    if let Some(ox) = &st.ox {
        unregister(ox.key().0);
        // Its QP's mover points into this id: no move may come once it is freed.
        ox.detach_qp();
    }
    drop(st.ox);
    if st.own_chan != 0 {
        // SAFETY: the id's private channel, made in create_id.
        unsafe { Chan::destroy(st.own_chan as *mut Chan) };
    }
    // SAFETY: made by `Id::alloc`; the program gives it back.
    drop(unsafe { Box::from_raw(idp.cast::<Id>()) });
    0
}

/// Runs `f` on the id; EINVAL for NULL.
fn with<R>(id: Option<&Id>, f: impl FnOnce(&Id) -> Result<R, c_int>) -> Result<R, c_int> {
    f(id.ok_or(libc::EINVAL)?)
}

fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `rdma_bind_addr`.
///
/// # Safety
/// `id` live; `addr` NULL or a socket address.
pub(crate) unsafe extern "C" fn bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    // SAFETY: the caller's promise.
    let a = unsafe { sockaddr::read(addr) };
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let a = a.ok_or(libc::EAFNOSUPPORT)?;
        let ox = id.ox_for(Some(a.ip()))?;
        ox.bind_addr(a).map_err(|e| errno_of(&e))?;
        id.write_route(&ox);
        if a.ip().is_loopback() && !crate::cm::devices::on_loopback() {
            id.hide_device();
        }
        Ok(())
    }))
}

/// `rdma_resolve_addr`: ADDR_RESOLVED follows (a synchronous id waits for it).
///
/// # Safety
/// `id` live; the addresses NULL or socket addresses.
pub(crate) unsafe extern "C" fn resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (s, d) = unsafe { (sockaddr::read(src), sockaddr::read(dst)) };
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let d = d.ok_or(libc::EINVAL)?;
        let ox = id.ox_for(s.map(|s| s.ip()))?;
        ox.resolve_addr(s, d).map_err(|e| errno_of(&e))?;
        id.write_route(&ox);
        id.show_device();
        complete(id)
    }))
}

/// `rdma_resolve_route`: ROUTE_RESOLVED follows.
///
/// # Safety
/// `id` live.
pub(crate) unsafe extern "C" fn resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let ox = id.ox()?;
        ox.resolve_route().map_err(|e| errno_of(&e))?;
        id.write_route(&ox);
        complete(id)
    }))
}

/// `rdma_listen` (an unbound id listens on any address, on a free port).
///
/// # Safety
/// `id` live.
pub(crate) unsafe extern "C" fn listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let ox = id.ox_for(None)?;
        // Linux takes a non-positive backlog as its default.
        let backlog = if backlog > 0 { backlog as usize } else { 1024 };
        ox.listen(backlog).map_err(|e| errno_of(&e))?;
        id.write_route(&ox);
        Ok(())
    }))
}

/// The connection parameters of `p` (NULL: librdmacm's defaults), with the id's
/// negotiated read limits and private data.
///
/// # Safety
/// `p` NULL or readable, its private data readable for its length.
unsafe fn conn_param(id: &Id, p: *const rdma_conn_param, qp_num: u32) -> ConnParam {
    let st = lock(&id.st);
    let mut data = st.connect_data.clone();
    // SAFETY: the caller's promise.
    let p = unsafe { p.as_ref() };
    if let Some(p) = p {
        if !p.private_data.is_null() && p.private_data_len > 0 {
            // SAFETY: the caller's promise.
            data.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    p.private_data.cast::<u8>(),
                    usize::from(p.private_data_len),
                )
            });
        }
    }
    // NULL: "as deep as the device (and the request) allows", as librdmacm.
    ConnParam {
        private_data: data,
        responder_resources: p.map_or(RDMA_MAX_RESP_RES, |p| p.responder_resources),
        initiator_depth: p.map_or(RDMA_MAX_INIT_DEPTH, |p| p.initiator_depth),
        flow_control: p.is_some_and(|p| p.flow_control != 0),
        retry_count: p.map_or(7, |p| p.retry_count),
        rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count),
        srq: p.is_some_and(|p| p.srq != 0),
        qp_num,
    }
}

/// The QPN and SRQ flag for a REQ or REP: the id's QP's, else the parameters'.
///
/// # Safety
/// `p` NULL or readable.
unsafe fn qp_of_param(id: &Id, p: *const rdma_conn_param) -> (u32, bool) {
    let qp = id.qp();
    if qp.is_null() {
        // SAFETY: the caller's promise.
        return unsafe { p.as_ref() }.map_or((0, false), |p| (p.qp_num, p.srq != 0));
    }
    // SAFETY: a live QP of the program's.
    unsafe { ((*qp).qp_num, !(*qp).srq.is_null()) }
}

/// `rdma_connect`: the REQ (UD: SIDR_REQ); ESTABLISHED or CONNECT_RESPONSE follows.
///
/// # Safety
/// `id` live; `param` NULL or readable.
pub(crate) unsafe extern "C" fn connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let ox = id.ox()?;
        // SAFETY: the caller's promise.
        let p = unsafe { param.as_ref() };
        if id.port_space() == PortSpace::Tcp && id.qp().is_null() && p.is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        let (qpn, srq) = unsafe { qp_of_param(id, param) };
        // SAFETY: the caller's promise.
        let mut cp = unsafe { conn_param(id, param, qpn) };
        cp.srq = srq;
        lock(&id.st).connect_data.clear();
        ox.connect(&cp).map_err(|e| errno_of(&e))?;
        complete(id)
    }))
}

/// `rdma_accept`: the QP to RTS, then the REP (UD: the SIDR_REP); a synchronous RC id
/// waits for ESTABLISHED.
///
/// # Safety
/// `id` live; `param` NULL or readable.
pub(crate) unsafe extern "C" fn accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let ox = id.ox()?;
        let ud = id.qp_type() == QpType::Ud;
        // SAFETY: the caller's promise.
        let (qpn, srq) = unsafe { qp_of_param(id, param) };
        // SAFETY: the caller's promise.
        let mut cp = unsafe { conn_param(id, param, qpn) };
        cp.srq = srq;
        // The id settles the depths and moves the QP (`oxrdma::cm::steps`).
        ox.accept(&cp).map_err(|e| errno_of(&e))?;
        if ud {
            return Ok(());
        }
        complete(id)
    }))
}

/// `rdma_reject` (REJ 28 with the private data; UD: SIDR_REP status 2).
///
/// # Safety
/// `id` live; `data` NULL or readable for `len`.
pub(crate) unsafe extern "C" fn reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    let bytes = if data.is_null() || len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }
    };
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        id.ox()?.reject(bytes).map_err(|e| errno_of(&e))
    }))
}

/// `rdma_reject_ece`: as `rdma_reject` (no ECE options exist to disagree on).
///
/// # Safety
/// As `reject`.
pub(crate) unsafe extern "C" fn reject_ece(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { reject(id, data, len) }
}

/// `rdma_disconnect`: the QP to ERR, then DREQ (or DREP).
///
/// # Safety
/// `id` live.
pub(crate) unsafe extern "C" fn disconnect(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        let ox = id.ox()?;
        // The id moves the QP to ERR first.
        ox.disconnect().map_err(|e| errno_of(&e))?;
        if id.qp_type() == QpType::Ud {
            return Ok(());
        }
        complete(id)
    }))
}

/// `rdma_establish`: the RTU, after CONNECT_RESPONSE (the program moved its QP).
///
/// # Safety
/// `id` live.
pub(crate) unsafe extern "C" fn establish(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: the caller's promise.
    ret(with(unsafe { Id::get(id) }, |id| {
        id.ox()?.establish().map_err(|e| errno_of(&e))
    }))
}

/// The addresses of `rdma_get_src_port` and `rdma_get_dst_port`.
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's promise.
    unsafe { id.as_ref() }.map_or(0, |c| sockaddr::port_be(&c.route.addr.src_addr))
}

/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's promise.
    unsafe { id.as_ref() }.map_or(0, |c| sockaddr::port_be(&c.route.addr.dst_addr))
}
