//! `rdma_getaddrinfo` / `rdma_freeaddrinfo` (name resolution by the system's resolver,
//! one result), and the endpoint calls built on them: `rdma_create_ep`,
//! `rdma_destroy_ep`, `rdma_get_request`.

use super::abi::*;
use super::calls;
use super::id::{fail, Id};
use super::sockaddr;
use crate::abi::{ibv_pd, ibv_qp_init_attr};
use std::ffi::{c_char, c_int};

/// `rdma_getaddrinfo`: 0, or getaddrinfo's EAI code (callers print `gai_strerror`). With
/// neither node nor service, the hints' addresses are the result (libfabric asks so).
/// Allocated as librdmacm does, the struct and each thing it points to with `malloc`:
/// callers free or replace a member themselves (libfabric's verbs provider does), and
/// `rdma_freeaddrinfo` frees what is there.
///
/// # Safety
/// `node`, `service` NULL or C strings; `hints` NULL or readable; `res` writable.
pub(crate) unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    // SAFETY: the caller's promise.
    let h = unsafe { hints.as_ref() };
    if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
        return fail(libc::EINVAL);
    }
    let flags = h.map_or(0, |h| h.ai_flags);
    let mut info = rdma_addrinfo {
        ai_flags: flags,
        ai_family: h.map_or(0, |h| h.ai_family),
        ai_qp_type: h.map_or(0, |h| h.ai_qp_type),
        ai_port_space: h.map_or(0, |h| h.ai_port_space),
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: std::ptr::null_mut(),
        ai_dst_addr: std::ptr::null_mut(),
        ai_src_canonname: std::ptr::null_mut(),
        ai_dst_canonname: std::ptr::null_mut(),
        ai_route_len: 0,
        ai_route: std::ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    };
    let (mut src, mut dst) = (None, None);
    if !node.is_null() || !service.is_null() {
        // SAFETY: the caller's strings.
        let addr = match unsafe { resolve(node, service, h) } {
            Ok(a) => a,
            Err(eai) => return eai,
        };
        let udp = h.is_some_and(|h| h.ai_port_space as u32 == RDMA_PS_UDP || h.ai_qp_type == 4);
        info.ai_family = if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        if info.ai_qp_type == 0 {
            info.ai_qp_type = if udp { 4 } else { 2 };
        }
        if info.ai_port_space == 0 {
            info.ai_port_space = if udp { RDMA_PS_UDP } else { RDMA_PS_TCP } as c_int;
        }
        if flags & RAI_PASSIVE != 0 {
            src = Some(addr);
        } else {
            dst = Some(addr);
        }
    } else if let Some(d) = h.and_then(|h| {
        // SAFETY: the hints' destination, the caller's to read.
        unsafe { sockaddr::read(h.ai_dst_addr) }
    }) {
        dst = Some(d);
    }
    // SAFETY: the hints' source address, if any, is the caller's to read.
    if let Some(s) = h.and_then(|h| unsafe { sockaddr::read(h.ai_src_addr) }) {
        src = src.or(Some(s));
    }
    let connect: &[u8] = match h.filter(|h| h.ai_connect_len > 0 && !h.ai_connect.is_null()) {
        // SAFETY: the hints' connect data, readable for its length.
        Some(h) => unsafe {
            std::slice::from_raw_parts(h.ai_connect.cast::<u8>(), h.ai_connect_len)
        },
        None => &[],
    };
    if let Some(a) = src {
        (info.ai_src_addr, info.ai_src_len) = malloc_sockaddr(a);
    }
    if let Some(a) = dst {
        (info.ai_dst_addr, info.ai_dst_len) = malloc_sockaddr(a);
    }
    if !connect.is_empty() {
        info.ai_connect = malloc_copy(connect).cast();
        info.ai_connect_len = connect.len();
    }
    let out = malloc_copy(bytes_of(&info)).cast::<rdma_addrinfo>();
    if out.is_null() {
        // SAFETY: what was allocated above, not yet handed out.
        unsafe { free_members(&info) };
        return libc::EAI_MEMORY;
    }
    // SAFETY: the caller's promise.
    unsafe { *res = out };
    0
}

/// The bytes of `v`.
fn bytes_of<T>(v: &T) -> &[u8] {
    // SAFETY: `v` is a live value of `size_of::<T>()` bytes; read as bytes only.
    unsafe { std::slice::from_raw_parts(std::ptr::from_ref(v).cast::<u8>(), size_of::<T>()) }
}

/// A `malloc`ed copy of `data` (NULL if out of memory), which C frees.
fn malloc_copy(data: &[u8]) -> *mut u8 {
    // SAFETY: malloc of at least one byte; checked for NULL before use.
    let p = unsafe { libc::malloc(data.len().max(1)) }.cast::<u8>();
    if !p.is_null() {
        // SAFETY: `p` has room for `data.len()` bytes, and does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }
    p
}

/// `a` as a `malloc`ed sockaddr of its own length, and that length (NULL, 0 if out of
/// memory).
fn malloc_sockaddr(a: std::net::SocketAddr) -> (*mut libc::sockaddr, u32) {
    let mut st = sockaddr_storage::default();
    sockaddr::write(&mut st, a);
    let len = sockaddr::len_of(&a);
    let p = malloc_copy(&bytes_of(&st)[..len as usize]);
    (p.cast(), if p.is_null() { 0 } else { len })
}

/// Frees what an entry points to (each `malloc`ed, by us or by the caller).
///
/// # Safety
/// Each non-NULL pointer of `r` came from `malloc` and is not freed elsewhere.
unsafe fn free_members(r: &rdma_addrinfo) {
    // SAFETY: the caller's promise.
    unsafe {
        libc::free(r.ai_connect);
        libc::free(r.ai_route);
        libc::free(r.ai_src_canonname.cast());
        libc::free(r.ai_dst_canonname.cast());
        libc::free(r.ai_src_addr.cast());
        libc::free(r.ai_dst_addr.cast());
    }
}

/// The system resolver's first address for `node` and `service`, or its EAI code.
///
/// # Safety
/// `node`, `service` NULL or C strings.
unsafe fn resolve(
    node: *const c_char,
    service: *const c_char,
    h: Option<&rdma_addrinfo>,
) -> Result<std::net::SocketAddr, c_int> {
    let flags = h.map_or(0, |h| h.ai_flags);
    let udp = h.is_some_and(|h| h.ai_port_space as u32 == RDMA_PS_UDP || h.ai_qp_type == 4);
    // SAFETY: plain data; zero is every field's "none".
    let mut g: libc::addrinfo = unsafe { std::mem::zeroed() };
    g.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
    g.ai_socktype = if udp {
        libc::SOCK_DGRAM
    } else {
        libc::SOCK_STREAM
    };
    if flags & RAI_PASSIVE != 0 {
        g.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        g.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut out: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: the caller's strings; `g` and `out` are valid.
    let r = unsafe { libc::getaddrinfo(node, service, &g, &mut out) };
    if r != 0 {
        return Err(r);
    }
    // SAFETY: getaddrinfo succeeded: `out` is a list with at least one entry.
    let addr = unsafe { sockaddr::read((*out).ai_addr) };
    // SAFETY: the list getaddrinfo made.
    unsafe { libc::freeaddrinfo(out) };
    addr.ok_or(libc::EAI_FAMILY)
}

/// `rdma_freeaddrinfo`: each entry and what it points to, as librdmacm frees them.
///
/// # Safety
/// `res` NULL or from `rdma_getaddrinfo`, not freed before (members the caller replaced
/// were `malloc`ed).
pub(crate) unsafe extern "C" fn freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: the caller's promise: a live entry `rdma_getaddrinfo` made.
        let next = unsafe { (*p).ai_next };
        // SAFETY: as above; the entry itself was `malloc`ed.
        unsafe {
            free_members(&*p);
            libc::free(p.cast());
        }
        p = next;
    }
}

/// `rdma_create_ep`: a synchronous id; passive: bound to the source address (its
/// requests get QPs like `qp_init_attr` in `rdma_get_request`); active: resolved to the
/// destination, with a QP if `qp_init_attr` is given.
///
/// # Safety
/// `idp` writable; `res` readable; `pd` NULL or allocated; `qp_init_attr` NULL or
/// readable and writable.
pub(crate) unsafe extern "C" fn create_ep(
    idp: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(r) = (unsafe { res.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    let mut c: *mut rdma_cm_id = std::ptr::null_mut();
    let qp_type = if r.ai_qp_type == 0 {
        2
    } else {
        r.ai_qp_type as u32
    };
    // SAFETY: a new synchronous id.
    if unsafe {
        calls::create_id_typed(
            std::ptr::null_mut(),
            &mut c,
            std::ptr::null_mut(),
            r.ai_port_space as u32,
            qp_type,
        )
    } != 0
    {
        return -1;
    }
    // SAFETY: just made.
    let ok = unsafe { set_up_ep(c, r, pd, qp_init_attr) };
    if ok != 0 {
        let e = crate::errno::last_errno().unwrap_or(libc::EINVAL);
        // SAFETY: ours, never handed out.
        unsafe { calls::destroy_id(c) };
        return fail(e);
    }
    // SAFETY: the caller's promise.
    unsafe { *idp = c };
    0
}

/// # Safety
/// As `create_ep`, `c` a live id.
unsafe fn set_up_ep(
    c: *mut rdma_cm_id,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(idr) = (unsafe { Id::get(c) }) else {
        return fail(libc::EINVAL);
    };
    if r.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: the caller's promise.
        if unsafe { calls::bind_addr(c, r.ai_src_addr) } != 0 {
            return -1;
        }
        // SAFETY: the caller's promise.
        if let Some(a) = unsafe { attr.as_ref() } {
            let mut a = *a;
            a.qp_type = qp_type_of(r);
            idr.st.lock().unwrap_or_else(|p| p.into_inner()).qp_init = Some(a);
        }
        if !pd.is_null() {
            // SAFETY: the id is live.
            unsafe { (*c).pd = pd };
        }
        return 0;
    }
    // SAFETY: the caller's promise.
    unsafe {
        if calls::resolve_addr(c, r.ai_src_addr, r.ai_dst_addr, 2000) != 0
            || calls::resolve_route(c, 2000) != 0
        {
            return -1;
        }
        if !pd.is_null() {
            (*c).pd = pd;
        }
        if !attr.is_null() {
            (*attr).qp_type = qp_type_of(r);
            if super::qp::create_qp(c, pd, attr) != 0 {
                return -1;
            }
        }
    }
    if r.ai_connect_len > 0 && !r.ai_connect.is_null() {
        // SAFETY: the caller's promise: readable for its length.
        let data =
            unsafe { std::slice::from_raw_parts(r.ai_connect.cast::<u8>(), r.ai_connect_len) };
        idr.st
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .connect_data = data.to_vec();
    }
    0
}

/// The QP type a result asks for (RC if it names none).
fn qp_type_of(r: &rdma_addrinfo) -> u32 {
    if r.ai_qp_type == 0 {
        2
    } else {
        r.ai_qp_type as u32
    }
}

/// `rdma_destroy_ep`: its QP, SRQ and id.
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn destroy_ep(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    unsafe {
        super::qp::destroy_qp(id);
        super::qp::destroy_srq(id);
        calls::destroy_id(id);
    }
}

/// `rdma_get_request`: the next connection request of a synchronous listener, as a new
/// id (with a QP if the endpoint was made with QP attributes) whose `event` is the request.
///
/// # Safety
/// `listen` live; `idp` writable.
pub(crate) unsafe extern "C" fn get_request(
    listen: *mut rdma_cm_id,
    idp: *mut *mut rdma_cm_id,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(l) = (unsafe { Id::get(listen) }) else {
        return fail(libc::EINVAL);
    };
    let (sync, qp_init) = {
        let st = l.st.lock().unwrap_or_else(|p| p.into_inner());
        (st.sync, st.qp_init)
    };
    if !sync || idp.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the listener is live; its last event is the library's to ack.
    unsafe {
        let old = std::mem::replace(&mut (*listen).event, std::ptr::null_mut());
        if !old.is_null() {
            super::event::ack_cm_event(old);
        }
    }
    let ev = match super::event::next_request(l) {
        Ok(ev) => ev,
        Err(e) => return fail(e),
    };
    // SAFETY: an event this library made.
    let e = unsafe { &*ev };
    let bad = if e.event == oxrdma::cm::CmEventType::Rejected as u32 {
        Some(libc::ECONNREFUSED)
    } else if e.status != 0 {
        Some(-e.status)
    } else if e.event != oxrdma::cm::CmEventType::ConnectRequest as u32 {
        Some(libc::EINVAL)
    } else {
        None
    };
    if let Some(err) = bad {
        // SAFETY: the listener is live.
        unsafe { (*listen).event = ev };
        return fail(err);
    }
    let new = e.id;
    if let Some(mut a) = qp_init {
        // SAFETY: the new id is live; the listener's PD is allocated.
        if unsafe { super::qp::create_qp(new, (*listen).pd, &mut a) } != 0 {
            // SAFETY: the listener is live.
            unsafe { (*listen).event = ev };
            return -1;
        }
    }
    // SAFETY: the new id is live; the caller's promise for `idp`.
    unsafe {
        (*new).event = ev;
        *idp = new;
    }
    0
}
