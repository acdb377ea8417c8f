//! QP attributes between oxrdma's [`QpAttr`] (an attribute is in the mask when it is
//! `Some`) and `struct ibv_qp_attr` with its mask: the C library takes them from programs
//! and hands them out (`rdma_init_qp_attr`), the rdma-core backend gives them to the
//! system's libibverbs and takes them from its librdmacm.

use crate::{ibv_ah_attr, ibv_gid, ibv_global_route, ibv_qp_attr};
use crate::{IBV_QP_ALT_PATH, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_PATH_MIG_STATE};
use oxrdma_core::mask::*;
use oxrdma_core::{Access, AddressVector, Gid, Mtu, QpAttr, QpState};

/// The hop limit of a RoCE v2 path's GRH (what rdma-core's tools use).
pub const HOP_LIMIT: u8 = 64;

/// An address vector as a global route from port 1.
pub fn ah_attr(av: AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: av.dgid.0 },
            flow_label: 0,
            sgid_index: av.sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
        },
        is_global: 1,
        port_num: 1,
        ..Default::default()
    }
}

/// `a` as C attributes and the mask of those it sets.
pub fn to_c(a: &QpAttr) -> (ibv_qp_attr, u32) {
    let mut c = ibv_qp_attr::default();
    if let Some(s) = a.qp_state {
        c.qp_state = s as u32;
    }
    if let Some(s) = a.cur_qp_state {
        c.cur_qp_state = s as u32;
    }
    if let Some(f) = a.qp_access_flags {
        c.qp_access_flags = f.bits();
    }
    c.pkey_index = a.pkey_index.unwrap_or(0);
    c.port_num = a.port_num.unwrap_or(0);
    c.qkey = a.qkey.unwrap_or(0);
    if let Some(av) = a.ah_attr {
        c.ah_attr = ah_attr(av);
    }
    if let Some(m) = a.path_mtu {
        c.path_mtu = m as u32;
    }
    c.timeout = a.timeout.unwrap_or(0);
    c.retry_cnt = a.retry_cnt.unwrap_or(0);
    c.rnr_retry = a.rnr_retry.unwrap_or(0);
    c.rq_psn = a.rq_psn.unwrap_or(0);
    c.max_rd_atomic = a.max_rd_atomic.unwrap_or(0);
    c.min_rnr_timer = a.min_rnr_timer.unwrap_or(0);
    c.sq_psn = a.sq_psn.unwrap_or(0);
    c.max_dest_rd_atomic = a.max_dest_rd_atomic.unwrap_or(0);
    c.dest_qp_num = a.dest_qp_num.unwrap_or(0);
    (c, a.mask())
}

/// Why C attributes have no `QpAttr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadAttr {
    /// A mask bit oxrdma does not carry (CAP, RATE_LIMIT, unknown bits).
    Mask(u32),
    /// An address without a GRH: RoCE needs one.
    NoGrh,
    /// A state or MTU number libibverbs does not define.
    Number(&'static str, u32),
}

impl std::fmt::Display for BadAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadAttr::Mask(m) => write!(f, "QP attribute mask bits {m:#x} are not supported"),
            BadAttr::NoGrh => write!(f, "a RoCE address needs a GRH (is_global)"),
            BadAttr::Number(what, n) => write!(f, "{n} is no {what}"),
        }
    }
}

impl std::error::Error for BadAttr {}

/// The attributes `m` names in `a`. Alternate paths, path migration and the drained event
/// do not exist on one RoCE port: taken and ignored, as rxe does.
pub fn from_c(a: &ibv_qp_attr, m: u32) -> Result<QpAttr, BadAttr> {
    let ignored = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY;
    if m & !(ignored | CARRIED) != 0 {
        return Err(BadAttr::Mask(m & !(ignored | CARRIED)));
    }
    let on = |bit: u32| m & bit != 0;
    let state = |n: u32| QpState::from_ibv(n).ok_or(BadAttr::Number("QP state", n));
    let av = if on(AV) {
        if a.ah_attr.is_global == 0 {
            return Err(BadAttr::NoGrh);
        }
        Some(AddressVector {
            dgid: Gid(a.ah_attr.grh.dgid.raw),
            sgid_index: a.ah_attr.grh.sgid_index,
        })
    } else {
        None
    };
    Ok(QpAttr {
        qp_state: on(STATE).then(|| state(a.qp_state)).transpose()?,
        cur_qp_state: on(CUR_STATE).then(|| state(a.cur_qp_state)).transpose()?,
        qp_access_flags: on(ACCESS_FLAGS).then(|| Access::from_bits_retain(a.qp_access_flags)),
        pkey_index: on(PKEY_INDEX).then_some(a.pkey_index),
        port_num: on(PORT).then_some(a.port_num),
        qkey: on(QKEY).then_some(a.qkey),
        ah_attr: av,
        path_mtu: on(PATH_MTU)
            .then(|| Mtu::from_ibv(a.path_mtu).ok_or(BadAttr::Number("path MTU", a.path_mtu)))
            .transpose()?,
        timeout: on(TIMEOUT).then_some(a.timeout),
        retry_cnt: on(RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: on(RNR_RETRY).then_some(a.rnr_retry),
        rq_psn: on(RQ_PSN).then_some(a.rq_psn),
        max_rd_atomic: on(MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        min_rnr_timer: on(MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        sq_psn: on(SQ_PSN).then_some(a.sq_psn),
        max_dest_rd_atomic: on(MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        dest_qp_num: on(DEST_QPN).then_some(a.dest_qp_num),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_go_to_c_and_back_with_their_mask() {
        let a = QpAttr {
            qp_state: Some(QpState::Rtr),
            qp_access_flags: Some(Access::REMOTE_WRITE | Access::REMOTE_READ),
            ah_attr: Some(AddressVector {
                dgid: Gid([7; 16]),
                sgid_index: 1,
            }),
            path_mtu: Some(Mtu::Mtu1024),
            dest_qp_num: Some(0x12),
            rq_psn: Some(0xabcdef),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        };
        let (c, m) = to_c(&a);
        assert_eq!(
            m,
            STATE
                | ACCESS_FLAGS
                | AV
                | PATH_MTU
                | DEST_QPN
                | RQ_PSN
                | MAX_DEST_RD_ATOMIC
                | MIN_RNR_TIMER
        );
        assert_eq!(
            (c.ah_attr.is_global, c.ah_attr.grh.hop_limit),
            (1, HOP_LIMIT)
        );
        assert_eq!(from_c(&c, m), Ok(a));
    }

    #[test]
    fn what_oxrdma_cannot_carry_is_named() {
        let c = ibv_qp_attr::default();
        assert_eq!(from_c(&c, 1 << 19), Err(BadAttr::Mask(1 << 19)));
        assert_eq!(from_c(&c, AV), Err(BadAttr::NoGrh));
        let bad = ibv_qp_attr {
            path_mtu: 9,
            ..Default::default()
        };
        assert_eq!(from_c(&bad, PATH_MTU), Err(BadAttr::Number("path MTU", 9)));
        assert_eq!(from_c(&c, IBV_QP_ALT_PATH), Ok(QpAttr::default()));
    }
}
