//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, and the `post_srq_recv` op.

use crate::abi::*;
use crate::context::{forget, remember};
use crate::errno::{errno_of, ptr_or_errno};
use crate::object::Obj;
use crate::pd::Pd;
use crate::registry::Kind;
use crate::work::post_recv_list;
use oxrdma::SharedReceiveQueue;
use std::ffi::c_int;

pub type SrqObj = Obj<ibv_srq, SharedReceiveQueue>;

/// `ibv_create_srq`.
///
/// # Safety
/// `pd` is NULL or allocated; `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: the caller's promise.
    let (Some(p), Some(a)) = (unsafe { Pd::get(pd) }, unsafe { attr.as_ref() }) else {
        return ptr_or_errno(Err(libc::EINVAL));
    };
    let r = p
        .ox()
        .create_srq(a.attr.max_wr, a.attr.max_sge, a.attr.srq_limit)
        .map_err(|e| errno_of(&e))
        .map(|srq| {
            let ibv = ibv_srq {
                // SAFETY: `ibv()` points into the live PD.
                context: unsafe { (*p.ibv()).context },
                srq_context: a.srq_context,
                pd,
                handle: 0,
                mutex: pthread_mutex_t([0; 40]),
                cond: pthread_cond_t([0; 48]),
                events_completed: 0,
            };
            let id = srq.id();
            let s = SrqObj::into_raw(ibv, srq);
            // SAFETY: the PD's context is open.
            unsafe { remember(ibv.context, Kind::Srq, id, s) };
            s
        });
    ptr_or_errno(r)
}

/// `ibv_modify_srq`: IBV_SRQ_LIMIT arms the limit event; resizing (IBV_SRQ_MAX_WR) is
/// not offered (EINVAL, nothing changed).
///
/// # Safety
/// `srq` is NULL or created; `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(s), Some(a)) = (unsafe { SrqObj::get(srq) }, unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    if mask & !IBV_SRQ_LIMIT != 0 || mask & IBV_SRQ_MAX_WR != 0 {
        return libc::EINVAL;
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        if let Err(e) = s.ox().arm(a.srq_limit) {
            return errno_of(&e);
        }
    }
    0
}

/// `ibv_query_srq`.
///
/// # Safety
/// `srq` is NULL or created; `attr` is NULL or writable.
pub(crate) unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: the caller's promise.
    let Some(s) = (unsafe { SrqObj::get(srq) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    match s.ox().query() {
        Ok(q) => {
            let out = ibv_srq_attr {
                max_wr: q.max_wr,
                max_sge: q.max_sge,
                srq_limit: q.srq_limit,
            };
            // SAFETY: writable (caller's promise, not NULL).
            unsafe { attr.write(out) };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `ibv_destroy_srq`: EBUSY while a QP uses it.
///
/// # Safety
/// `srq` is NULL or created and not used by another thread.
pub(crate) unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: the caller's promise: NULL or a live SRQ.
    let named = unsafe { SrqObj::get(srq) }.map(|s| {
        // SAFETY: `ibv()` is the live SRQ's struct.
        (unsafe { (*s.ibv()).context }, s.ox().id())
    });
    // SAFETY: the caller's promise.
    let r = unsafe { SrqObj::destroy(srq, SharedReceiveQueue::try_destroy) };
    if let (0, Some((ctx, id))) = (r, named) {
        // SAFETY: the SRQ's context is open while the SRQ lives.
        unsafe { forget(ctx, Kind::Srq, id) };
    }
    r
}

/// `ops.post_srq_recv`.
///
/// # Safety
/// `srq` is NULL or created; `wr` is a readable list; `bad` is NULL or writable.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(s) = (unsafe { SrqObj::get(srq) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's promise.
    unsafe { post_recv_list(wr, bad, |w| s.ox().post_recv(w)) }
}
