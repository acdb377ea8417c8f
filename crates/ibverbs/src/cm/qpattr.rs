//! oxrdma's QP attributes as `struct ibv_qp_attr` and a mask (`rdma_init_qp_attr`), and
//! moving a program's QP with them through the library's own `ibv_modify_qp` (so the
//! QP's `state` field follows).

use crate::abi::{ibv_gid, ibv_qp, ibv_qp_attr};
use oxrdma::qp_attr_mask::*;
use oxrdma::QpAttr;
use std::ffi::c_int;

/// `a` as C attributes and the mask of those it sets.
pub fn to_ibv(a: &QpAttr) -> (ibv_qp_attr, c_int) {
    let mut c = ibv_qp_attr::default();
    let mut m = 0u32;
    let mut set = |bit: u32| m |= bit;
    if let Some(v) = a.qp_state {
        c.qp_state = v as u32;
        set(STATE);
    }
    if let Some(v) = a.qp_access_flags {
        c.qp_access_flags = v.bits();
        set(ACCESS_FLAGS);
    }
    if let Some(v) = a.pkey_index {
        c.pkey_index = v;
        set(PKEY_INDEX);
    }
    if let Some(v) = a.port_num {
        c.port_num = v;
        set(PORT);
    }
    if let Some(v) = a.qkey {
        c.qkey = v;
        set(QKEY);
    }
    if let Some(av) = a.ah_attr {
        c.ah_attr.is_global = 1;
        c.ah_attr.port_num = 1;
        c.ah_attr.grh.dgid = ibv_gid { raw: av.dgid.0 };
        c.ah_attr.grh.sgid_index = av.sgid_index;
        c.ah_attr.grh.hop_limit = 64;
        set(AV);
    }
    if let Some(v) = a.path_mtu {
        c.path_mtu = v as u32;
        set(PATH_MTU);
    }
    if let Some(v) = a.timeout {
        c.timeout = v;
        set(TIMEOUT);
    }
    if let Some(v) = a.retry_cnt {
        c.retry_cnt = v;
        set(RETRY_CNT);
    }
    if let Some(v) = a.rnr_retry {
        c.rnr_retry = v;
        set(RNR_RETRY);
    }
    if let Some(v) = a.rq_psn {
        c.rq_psn = v;
        set(RQ_PSN);
    }
    if let Some(v) = a.max_rd_atomic {
        c.max_rd_atomic = v;
        set(MAX_QP_RD_ATOMIC);
    }
    if let Some(v) = a.min_rnr_timer {
        c.min_rnr_timer = v;
        set(MIN_RNR_TIMER);
    }
    if let Some(v) = a.sq_psn {
        c.sq_psn = v;
        set(SQ_PSN);
    }
    if let Some(v) = a.max_dest_rd_atomic {
        c.max_dest_rd_atomic = v;
        set(MAX_DEST_RD_ATOMIC);
    }
    if let Some(v) = a.dest_qp_num {
        c.dest_qp_num = v;
        set(DEST_QPN);
    }
    (c, m as c_int)
}

/// Modifies the program's QP `qp` to `a`.
pub fn modify(qp: *mut ibv_qp, a: &QpAttr) -> Result<(), c_int> {
    let (mut c, mask) = to_ibv(a);
    // SAFETY: `qp` is a live QP of this library's (the id's); `c` is a valid attribute.
    match unsafe { crate::qp::modify_qp(qp, &mut c, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}
