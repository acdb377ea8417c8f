//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`, and
//! the `post_send` and `post_recv` ops the header's inline verbs call.

use crate::abi::*;
use crate::context::{forget, remember};
use crate::cq::cq_of;
use crate::errno::{errno_of, ptr_or_errno};
use crate::object::Obj;
use crate::pd::Pd;
use crate::registry::Kind;
use crate::srq::SrqObj;
use crate::work::{post_list, post_recv_list, send_wr};
use oxrdma::{QpAttr, QpCap, QpInit, QpState, QpType, QueuePair};
use std::ffi::{c_int, c_uint};
use std::sync::Mutex;

/// The work requests of one `ibv_wr_start` … `ibv_wr_complete` (`qp_ex.rs`), and the
/// first error met while building them (reported by `ibv_wr_complete`, as rxe does).
#[derive(Debug, Default)]
pub struct Batch {
    pub(crate) wrs: Vec<oxrdma::SendWr>,
    pub(crate) err: c_int,
}

/// A QP and, if `ibv_create_qp_ex` made it, the work requests its extended send API
/// (`ibv_wr_start` … `ibv_wr_complete`) is building.
#[derive(Debug)]
pub struct Qp {
    qp: QueuePair,
    pub(crate) ex: Option<Mutex<Batch>>,
}

impl std::ops::Deref for Qp {
    type Target = QueuePair;
    fn deref(&self) -> &QueuePair {
        &self.qp
    }
}

/// Every QP is allocated as an `ibv_qp_ex` (whose start is the `ibv_qp`).
pub type QpObj = Obj<qp_ex_newest, Qp>;

/// The QP behind a program's `ibv_qp *`.
///
/// # Safety
/// `p` is NULL or a QP this library created and the program has not destroyed.
pub(crate) unsafe fn qp_of<'a>(p: *mut ibv_qp) -> Option<&'a QpObj> {
    // SAFETY: the caller's promise; the `ibv_qp` is the start of the `qp_ex_newest`.
    unsafe { QpObj::get(p.cast()) }
}

fn qp_type(t: c_uint) -> Result<QpType, c_int> {
    match t {
        2 => Ok(QpType::Rc),
        3 => Ok(QpType::Uc),
        4 => Ok(QpType::Ud),
        // Raw packet and XRC QPs: rxe (Linux 6.1) refuses them with EOPNOTSUPP, which
        // rdma-core's tests take as "not supported"; what is no QP type at all is EINVAL.
        8..=10 => Err(libc::EOPNOTSUPP),
        _ => Err(libc::EINVAL),
    }
}

/// `ibv_create_qp`: writes the capacities the QP got back into `attr.cap`.
///
/// # Safety
/// `pd` is NULL or allocated; `attr` is NULL or readable and writable, its CQs and SRQ
/// NULL or created.
pub(crate) unsafe extern "C" fn create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller's promise.
    let r = unsafe { attr.as_mut() }.ok_or(libc::EINVAL);
    // SAFETY: the caller's promise.
    ptr_or_errno(r.and_then(|a| unsafe { new_qp(pd, a, None) }))
}

/// A QP of `pd` as `a` describes it (its capacities written back); `ex` fills in the
/// extended send API (`ibv_create_qp_ex` with send_ops_flags).
///
/// # Safety
/// `pd` is NULL or allocated; `a`'s CQs and SRQ are NULL or created.
pub(crate) unsafe fn new_qp(
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    ex: Option<fn(&mut ibv_qp_ex)>,
) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: the caller's promise.
    let p = unsafe { Pd::get(pd) }.ok_or(libc::EINVAL)?;
    let t = qp_type(a.qp_type)?;
    // SAFETY: the caller's promise.
    let send_cq = unsafe { cq_of(a.send_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: the caller's promise.
    let recv_cq = unsafe { cq_of(a.recv_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: the caller's promise.
    let srq = unsafe { SrqObj::get(a.srq) };
    let cap = QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    let init = QpInit {
        srq: srq.map(|s| s.ox()),
        sq_sig_all: a.sq_sig_all != 0,
        ..QpInit::new(t, cap)
    };
    let qp = p
        .ox()
        .create_qp_with(send_cq.ox().ox(), recv_cq.ox().ox(), init)
        .map_err(|e| errno_of(&e))?;
    // SAFETY: `ibv()` points into the live PD.
    let context = unsafe { (*p.ibv()).context };
    let qp_base = ibv_qp {
        context,
        qp_context: a.qp_context,
        pd,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        handle: 0,
        qp_num: qp.qpn(),
        state: QpState::Reset as u32,
        qp_type: a.qp_type,
        mutex: pthread_mutex_t([0; 40]),
        cond: pthread_cond_t([0; 48]),
        events_completed: 0,
    };
    let mut ibv = qp_ex_newest {
        ex: ibv_qp_ex {
            qp_base,
            ..ibv_qp_ex::EMPTY
        },
        wr_flush: None,
    };
    if let Some(f) = ex {
        f(&mut ibv.ex);
    }
    let ex = ex.map(|_| Mutex::new(Batch::default()));
    let qpn = qp.qpn();
    let p = QpObj::into_raw(ibv, Qp { qp, ex }).cast::<ibv_qp>();
    // SAFETY: the PD's context is open.
    unsafe { remember(context, Kind::Qp, qpn, p) };
    Ok(p)
}

/// `ibv_destroy_qp`.
///
/// # Safety
/// `qp` is NULL or created and not used by another thread.
pub(crate) unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: the caller's promise: NULL or a live QP.
    let named = unsafe { qp.as_ref() }.map(|q| (q.context, q.qp_num));
    // SAFETY: the caller's promise.
    // The error (the object handed back) never happens here: a QP always drops.
    #[allow(clippy::result_large_err)]
    let r = unsafe {
        QpObj::destroy(qp.cast(), |q| {
            drop(q);
            Ok(())
        })
    };
    if let (0, Some((ctx, qpn))) = (r, named) {
        // SAFETY: the QP's context is open while the QP lives.
        unsafe { forget(ctx, Kind::Qp, qpn) };
    }
    r
}

/// The attributes `mask` names in `a` (CAP, RATE_LIMIT and unknown bits refused, as rxe
/// does: EINVAL).
fn qp_attr(a: &ibv_qp_attr, m: u32) -> Result<QpAttr, c_int> {
    crate::abi::qp_attr::from_c(a, m).map_err(|_| libc::EINVAL)
}

/// `ibv_modify_qp`: 0, or the errno (EINVAL for a transition or mask that rdma-core on
/// rxe refuses).
///
/// # Safety
/// `qp` is NULL or created; `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(q), Some(a)) = (unsafe { qp_of(qp) }, unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    let attr = match qp_attr(a, mask as u32) {
        Ok(v) => v,
        Err(e) => return e,
    };
    if let Err(e) = q.ox().modify(&attr) {
        return errno_of(&e);
    }
    if let Some(s) = attr.qp_state {
        // SAFETY: `ibv()` points into the live QP; the program reads `state` as
        // rdma-core keeps it: the last state it modified the QP to.
        unsafe { (*q.ibv()).ex.qp_base.state = s as u32 };
    }
    0
}

/// `ibv_query_qp`: every attribute (whatever `mask` asks for, as rxe fills them all) and
/// the creation attributes.
///
/// # Safety
/// `qp` is NULL or created; `attr` and `init` are NULL or writable.
pub(crate) unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || init.is_null() {
        return libc::EINVAL;
    }
    let (a, cap, sig_all) = match q.ox().query() {
        Ok(v) => v,
        Err(e) => return errno_of(&e),
    };
    let cap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    let state = a.qp_state.unwrap_or(QpState::Reset) as u32;
    let mut ah = ibv_ah_attr {
        port_num: 1,
        ..Default::default()
    };
    if let Some(av) = a.ah_attr {
        ah.is_global = 1;
        ah.grh.dgid = ibv_gid { raw: av.dgid.0 };
        ah.grh.sgid_index = av.sgid_index;
        ah.grh.hop_limit = 1;
    }
    let out = ibv_qp_attr {
        qp_state: state,
        cur_qp_state: state,
        path_mtu: a.path_mtu.map_or(0, |m| m as u32),
        path_mig_state: 0, // IBV_MIG_MIGRATED
        qkey: a.qkey.unwrap_or(0),
        rq_psn: a.rq_psn.unwrap_or(0),
        sq_psn: a.sq_psn.unwrap_or(0),
        dest_qp_num: a.dest_qp_num.unwrap_or(0),
        qp_access_flags: a.qp_access_flags.map_or(0, |f| f.bits()),
        cap,
        ah_attr: ah,
        alt_ah_attr: ibv_ah_attr::default(),
        pkey_index: 0,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: 0,
        max_rd_atomic: a.max_rd_atomic.unwrap_or(0),
        max_dest_rd_atomic: a.max_dest_rd_atomic.unwrap_or(0),
        min_rnr_timer: a.min_rnr_timer.unwrap_or(0),
        port_num: 1,
        timeout: a.timeout.unwrap_or(0),
        retry_cnt: a.retry_cnt.unwrap_or(0),
        rnr_retry: a.rnr_retry.unwrap_or(0),
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    };
    // SAFETY: `ibv()` points into the live QP; the fields were set at creation.
    let b = unsafe { (*q.ibv()).ex.qp_base };
    let init_out = ibv_qp_init_attr {
        qp_context: b.qp_context,
        send_cq: b.send_cq,
        recv_cq: b.recv_cq,
        srq: b.srq,
        cap,
        qp_type: b.qp_type,
        sq_sig_all: c_int::from(sig_all),
    };
    // SAFETY: both writable (caller's promise, not NULL).
    unsafe {
        attr.write(out);
        init.write(init_out);
    }
    0
}

/// `ops.post_send`: each WR checked and queued in order; the first that fails is named
/// in `bad` with its errno (EINVAL in a state that cannot send, ENOMEM when the queue is
/// full), and the ones after it are not posted.
///
/// # Safety
/// `qp` is NULL or created; `wr` is a readable list; `bad` is NULL or writable.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return libc::EINVAL;
    };
    let ud = q.ox().qp_type() == QpType::Ud;
    // Every WR queued, then the device driven once (when `list` drops).
    let mut list = q.ox().post_list();
    // SAFETY: the caller's promise.
    unsafe {
        post_list(wr, bad, |w| {
            list.post_send(send_wr(w, ud)?).map_err(|e| errno_of(&e))
        })
    }
}

/// `ops.post_recv`, as `post_send` for receives.
///
/// # Safety
/// `qp` is NULL or created; `wr` is a readable list; `bad` is NULL or writable.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return libc::EINVAL;
    };
    let mut list = q.ox().post_list();
    // SAFETY: the caller's promise.
    unsafe { post_recv_list(wr, bad, |w| list.post_recv(w)) }
}
