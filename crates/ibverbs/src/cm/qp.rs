//! `rdma_create_qp`, `rdma_create_qp_ex`, `rdma_destroy_qp` and the SRQ calls: the QP is
//! an ordinary one of this library (the program posts and polls it through the verbs),
//! made with CQs of the id's own when the program gives none, and moved to INIT (UD: to
//! RTS) as librdmacm does.

use super::abi::rdma_cm_id;
use super::id::{fail, Id};
use crate::abi::*;
use oxrdma::cm::QpMover;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Makes a completion channel and a CQ of `n` entries on the id, if `n` > 0.
///
/// # Safety
/// `c` is a live id's struct.
unsafe fn make_cq(c: *mut rdma_cm_id, n: u32, send: bool) -> Result<(), c_int> {
    if n == 0 {
        return Ok(());
    }
    // SAFETY: the caller's promise; `verbs` is an open context.
    unsafe {
        let ch = crate::cq::create_comp_channel((*c).verbs);
        if ch.is_null() {
            return Err(crate::errno::last_errno().unwrap_or(libc::ENOMEM));
        }
        let cq = crate::cq::create_cq((*c).verbs, n as c_int, c.cast::<c_void>(), ch, 0);
        if cq.is_null() {
            crate::cq::destroy_comp_channel(ch);
            return Err(crate::errno::last_errno().unwrap_or(libc::ENOMEM));
        }
        if send {
            ((*c).send_cq_channel, (*c).send_cq) = (ch, cq);
        } else {
            ((*c).recv_cq_channel, (*c).recv_cq) = (ch, cq);
        }
    }
    Ok(())
}

/// Destroys the CQs and channels the library made on the id.
///
/// # Safety
/// `c` is a live id's struct whose QP is gone.
unsafe fn drop_cqs(c: *mut rdma_cm_id) {
    // SAFETY: the caller's promise; each is NULL or made by `make_cq`.
    unsafe {
        for (cq, ch) in [
            (&mut (*c).send_cq, &mut (*c).send_cq_channel),
            (&mut (*c).recv_cq, &mut (*c).recv_cq_channel),
        ] {
            if !cq.is_null() {
                crate::cq::destroy_cq(*cq);
                *cq = std::ptr::null_mut();
            }
            if !ch.is_null() {
                crate::cq::destroy_comp_channel(*ch);
                *ch = std::ptr::null_mut();
            }
        }
    }
}

/// `rdma_create_qp_ex`.
///
/// # Safety
/// `id` live; `attr` NULL or readable and writable.
pub(crate) unsafe extern "C" fn create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(idr), Some(a)) = (unsafe { Id::get(id) }, unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let c = idr.c();
    // SAFETY: the id is live; the library and the program share its struct.
    unsafe {
        if !(*c).qp.is_null() {
            return fail(libc::EINVAL);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
            a.pd = (*c).pd;
        } else if (*a.pd).context != (*c).verbs {
            return fail(libc::EINVAL);
        }
        if a.pd.is_null() {
            return fail(libc::EINVAL);
        }
        let send = if a.send_cq.is_null() && (*c).send_cq.is_null() {
            a.cap.max_send_wr
        } else {
            0
        };
        let recv = if a.recv_cq.is_null() && (*c).recv_cq.is_null() {
            a.cap.max_recv_wr
        } else {
            0
        };
        if let Err(e) = make_cq(c, recv, false).and_then(|()| make_cq(c, send, true)) {
            drop_cqs(c);
            return fail(e);
        }
        if a.send_cq.is_null() {
            a.send_cq = (*c).send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = (*c).recv_cq;
        }
        if a.srq.is_null() {
            a.srq = (*c).srq;
        }
        let qp = crate::qp_ex::create_qp_ex((*c).verbs, attr);
        if qp.is_null() {
            let e = crate::errno::last_errno().unwrap_or(libc::EINVAL);
            drop_cqs(c);
            return fail(e);
        }
        (*c).qp = qp;
        if let Err(e) = init(idr, qp) {
            if let Ok(ox) = idr.ox() {
                ox.detach_qp();
            }
            (*c).qp = std::ptr::null_mut();
            crate::qp::destroy_qp(qp);
            drop_cqs(c);
            return fail(e);
        }
        (*c).pd = (*qp).pd;
    }
    0
}

/// The program's QP, moved by its oxrdma id through this library's `ibv_modify_qp`, so the
/// program's struct follows every move; only while it is still the id's `qp` (a program
/// that destroys it with `ibv_destroy_qp` and clears `id->qp` gets no move on it, as
/// librdmacm, which moves whatever `id->qp` holds).
#[derive(Debug)]
struct ProgramQp {
    id: *mut rdma_cm_id,
    qp: *mut ibv_qp,
}

// SAFETY: the id's struct lives until `rdma_destroy_id` and the QP until
// `rdma_destroy_qp`, and both detach this mover from the oxrdma id before they free
// anything; the library's `ibv_modify_qp` may be called from any thread.
unsafe impl Send for ProgramQp {}
// SAFETY: as above; `modify` takes the QP's device lock.
unsafe impl Sync for ProgramQp {}

impl QpMover for ProgramQp {
    fn modify(&self, attr: &oxrdma::QpAttr) -> Result<(), c_int> {
        // SAFETY: the id's struct is live while this mover is attached (above).
        if unsafe { (*self.id).qp } != self.qp {
            return Ok(());
        }
        super::qpattr::modify(self.qp, attr)
    }
}

/// A new QP made the id's, which moves it from now on (RC and UC to INIT, UD to RTS at
/// once; `oxrdma::cm::CmId::attach_qp_with`).
fn init(id: &Id, qp: *mut ibv_qp) -> Result<(), c_int> {
    let ox = id.ox()?;
    // SAFETY: a live QP of this library's, just made.
    let qpn = unsafe { (*qp).qp_num };
    ox.attach_qp_with(qpn, Arc::new(ProgramQp { id: id.c(), qp }))
        .map_err(|e| crate::errno::errno_of(&e))
}

/// `rdma_create_qp`: `rdma_create_qp_ex` with `pd` (NULL: the id's).
///
/// # Safety
/// `id` live; `pd` NULL or allocated; `attr` readable and writable.
pub(crate) unsafe extern "C" fn create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the caller's promise.
    let Some(idr) = (unsafe { Id::get(id) }) else {
        return fail(libc::EINVAL);
    };
    let mut ex = ibv_qp_init_attr_ex {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
        comp_mask: IBV_QP_INIT_ATTR_PD,
        pd: if pd.is_null() {
            // SAFETY: the id is live.
            unsafe { (*idr.c()).pd }
        } else {
            pd
        },
        xrcd: std::ptr::null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: std::ptr::null_mut(),
        rx_hash_conf: ibv_rx_hash_conf {
            rx_hash_function: 0,
            rx_hash_key_len: 0,
            rx_hash_key: std::ptr::null_mut(),
            rx_hash_fields_mask: 0,
        },
        source_qpn: 0,
        send_ops_flags: 0,
    };
    // SAFETY: the caller's promise.
    let r = unsafe { create_qp_ex(id, &mut ex) };
    (a.send_cq, a.recv_cq, a.srq, a.cap) = (ex.send_cq, ex.recv_cq, ex.srq, ex.cap);
    r
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: the caller's promise.
    if let Some(idr) = unsafe { Id::get(id) } {
        if let Ok(ox) = idr.ox() {
            ox.detach_qp();
        }
    }
    // SAFETY: the caller's promise.
    if let Some(c) = unsafe { id.as_mut() } {
        if !c.qp.is_null() {
            // SAFETY: the id's QP, made by `create_qp_ex`.
            unsafe { crate::qp::destroy_qp(c.qp) };
            c.qp = std::ptr::null_mut();
        }
        // SAFETY: the QP is gone.
        unsafe { drop_cqs(id) };
    }
}

/// `rdma_create_srq`: an SRQ on the id's PD (or `pd`), which its QP will use.
///
/// # Safety
/// `id` live; `pd` NULL or allocated; `attr` readable and writable.
pub(crate) unsafe extern "C" fn create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { id.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let pd = if pd.is_null() { c.pd } else { pd };
    // SAFETY: the caller's promise.
    let srq = unsafe { crate::srq::create_srq(pd, attr) };
    if srq.is_null() {
        return -1;
    }
    c.srq = srq;
    c.pd = pd;
    0
}

/// `rdma_create_srq_ex`: EOPNOTSUPP. Its extra (XRC SRQs, tag matching) does not exist
/// here, and the one program known to call it (rdma_xserver) needs XRC.
pub(crate) extern "C" fn create_srq_ex(_id: *mut rdma_cm_id, _attr: *mut c_void) -> c_int {
    fail(libc::EOPNOTSUPP)
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` NULL or live.
pub(crate) unsafe extern "C" fn destroy_srq(id: *mut rdma_cm_id) {
    // SAFETY: the caller's promise.
    if let Some(c) = unsafe { id.as_mut() } {
        if !c.srq.is_null() {
            // SAFETY: the id's SRQ.
            unsafe { crate::srq::destroy_srq(c.srq) };
            c.srq = std::ptr::null_mut();
        }
    }
}
