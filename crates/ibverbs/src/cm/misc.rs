//! The rest of librdmacm's calls: `rdma_init_qp_attr`, options, `rdma_migrate_id`,
//! `rdma_notify`, the device list, ECE, and multicast (which oxrdma does not do).

use super::abi::*;
use super::id::{fail, Chan, Id};
use super::qpattr;
use crate::abi::{ibv_context, ibv_qp_attr};
use std::ffi::{c_int, c_void};

/// `rdma_init_qp_attr`: the attributes (and mask) that take a QP of this connection to
/// `attr->qp_state` (INIT, RTR or RTS).
///
/// # Safety
/// `id` live; `attr` readable and writable; `mask` writable.
pub(crate) unsafe extern "C" fn init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(idr), Some(a)) = (unsafe { Id::get(id) }, unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    if mask.is_null() {
        return fail(libc::EINVAL);
    }
    let state = match a.qp_state {
        1 => oxrdma::QpState::Init,
        2 => oxrdma::QpState::Rtr,
        3 => oxrdma::QpState::Rts,
        _ => return fail(libc::EINVAL),
    };
    let ox = match idr.ox() {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    match ox.init_qp_attr(state) {
        Ok(q) => {
            let (c, m) = qpattr::to_ibv(&q);
            *a = c;
            // SAFETY: the caller's promise.
            unsafe { *mask = m };
            0
        }
        Err(e) => fail(crate::errno::errno_of(&e)),
    }
}

/// `rdma_set_option`: the id options (type of service, address reuse, IPv6-only, ACK
/// timeout) are taken; RoCE has nothing for them to change here. IB path records: EINVAL.
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    _optlen: usize,
) -> c_int {
    const RDMA_OPTION_ID: c_int = 0;
    if id.is_null() || optval.is_null() {
        return fail(libc::EINVAL);
    }
    match (level, optname) {
        (RDMA_OPTION_ID, 0..=3) => 0,
        _ => fail(libc::EINVAL),
    }
}

/// `rdma_migrate_id`: the id's events (those waiting too) go to `ch` from now on; NULL
/// makes the id synchronous, on a channel of its own.
///
/// # Safety
/// `id` live; `ch` NULL or a live channel.
pub(crate) unsafe extern "C" fn migrate_id(
    id: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(idr) = (unsafe { Id::get(id) }) else {
        return fail(libc::EINVAL);
    };
    let (target, own) = if ch.is_null() {
        match Chan::new() {
            Ok(c) => (c.cast::<rdma_event_channel>(), true),
            Err(e) => return fail(e),
        }
    } else {
        (ch, false)
    };
    // SAFETY: a live channel (the caller's, or just made).
    let Some(to) = (unsafe { Chan::get(target) }) else {
        return fail(libc::EINVAL);
    };
    let old_chan = idr.chan();
    if let Ok(ox) = idr.ox() {
        // Both the C library's, so of the engine: the move cannot be refused.
        let _ = ox.migrate(&to.ox);
    }
    // Events a synchronous wait set aside for this id move too.
    if let (Some(old), Ok(ox)) = (old_chan, idr.ox()) {
        if !std::ptr::eq(old, to) {
            let key = ox.key();
            let mut parked = old.parked.lock().unwrap_or_else(|p| p.into_inner());
            let (mine, rest): (Vec<_>, Vec<_>) = parked.drain(..).partition(|e| e.id == key);
            parked.extend(rest);
            to.parked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(mine);
        }
    }
    let old_own = {
        let mut st = idr.st.lock().unwrap_or_else(|p| p.into_inner());
        st.sync = own;
        std::mem::replace(&mut st.own_chan, if own { target as usize } else { 0 })
    };
    // SAFETY: the id is live; the program reads `channel`, the library sets it.
    unsafe { (*id).channel = target };
    if old_own != 0 {
        // SAFETY: the id's former private channel, made by this library; nothing of it is
        // left (its events moved above).
        unsafe { Chan::destroy(old_own as *mut Chan) };
    }
    0
}

/// `rdma_notify`: the program saw IBV_EVENT_COMM_EST; the RTU (or the data behind it)
/// establishes the connection here, so there is nothing to do.
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn notify(id: *mut rdma_cm_id, _event: u32) -> c_int {
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    0
}

/// `rdma_get_devices`: every device's context (the ones ids use), NULL-terminated.
///
/// # Safety
/// `num` NULL or writable.
pub(crate) unsafe extern "C" fn get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    match super::devices::all() {
        // SAFETY: the caller's promise.
        Ok(l) => unsafe { crate::device::null_terminated(l.iter().map(|d| d.verbs()), num) },
        Err(e) => {
            crate::errno::set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `rdma_free_devices`.
///
/// # Safety
/// `list` NULL or from `rdma_get_devices`, not freed before.
pub(crate) unsafe extern "C" fn free_devices(list: *mut *mut ibv_context) {
    // SAFETY: the caller's promise.
    unsafe { crate::device::free_null_terminated(list) }
}

/// `struct ibv_ece`.
#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `rdma_set_local_ece`: accepted; no ECE options are offered (rxe offers none).
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    if id.is_null() || ece.is_null() {
        return fail(libc::EINVAL);
    }
    0
}

/// `rdma_get_remote_ece`: the peer's ECE, which is none (vendor 0).
///
/// # Safety
/// `id` NULL or live; `ece` NULL or writable.
pub(crate) unsafe extern "C" fn get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    // SAFETY: the caller's promise.
    let Some(e) = (unsafe { ece.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    *e = ibv_ece {
        vendor_id: 0,
        options: 0,
        comp_mask: 0,
    };
    0
}

/// `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`: oxrdma has no
/// multicast (ENOSYS).
pub(crate) extern "C" fn no_multicast() -> c_int {
    fail(libc::ENOSYS)
}
