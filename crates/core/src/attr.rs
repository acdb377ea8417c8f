//! Queue-pair creation and modify-QP attributes, and the libibverbs rules for which
//! attributes each state transition requires and allows.

use crate::error::{Result, VerbsError};
use crate::gid::Gid;
use crate::verbs::{Access, Mtu, QpState, QpType};

/// `struct ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Max outstanding work requests in the send queue.
    pub max_send_wr: u32,
    /// Max outstanding work requests in the receive queue.
    pub max_recv_wr: u32,
    /// Max scatter/gather elements in one send WR.
    pub max_send_sge: u32,
    /// Max scatter/gather elements in one receive WR.
    pub max_recv_sge: u32,
    /// Max bytes of inline data (`IBV_SEND_INLINE`) in one send WR.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// `struct ibv_qp_init_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Transport service type: RC, UC or UD.
    pub qp_type: QpType,
    /// Handle of the CQ that send-queue completions go to.
    pub send_cq: u32,
    /// Handle of the CQ that receive-queue completions go to.
    pub recv_cq: u32,
    /// Queue sizes the QP is created with.
    pub cap: QpCap,
    /// Every send WR generates a completion, whatever its SIGNALED flag says.
    pub sq_sig_all: bool,
    /// Take receives from this shared receive queue (RC, UD).
    pub srq: Option<u32>,
}

/// Where a connected QP sends (`struct ibv_ah_attr`, the part RoCEv2 uses): the peer's
/// GID, and which of the device's GIDs the packets leave from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddressVector {
    /// Destination GID: the peer's IP address.
    pub dgid: Gid,
    /// An index into the device's GID table (`EngineConfig::gids`).
    pub sgid_index: u8,
}

impl AddressVector {
    /// To `dgid`, from the device's first GID.
    pub fn to(dgid: Gid) -> AddressVector {
        AddressVector {
            dgid,
            sgid_index: 0,
        }
    }
}

/// `struct ibv_qp_attr` with the mask folded in: an attribute is in the mask when it is Some.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// The state to move the QP to.
    pub qp_state: Option<QpState>,
    /// The state the caller believes the QP is in; the modify fails if it is in another.
    pub cur_qp_state: Option<QpState>,
    /// Remote operations the responder accepts on an RC or UC QP (REMOTE_WRITE,
    /// REMOTE_READ, REMOTE_ATOMIC).
    pub qp_access_flags: Option<Access>,
    /// Index into the port's P_Key table (only 0 exists).
    pub pkey_index: Option<u16>,
    /// Physical port number (only port 1 exists).
    pub port_num: Option<u8>,
    /// Q_Key of a UD QP: incoming datagrams must carry it.
    pub qkey: Option<u32>,
    /// Primary path to the remote QP (RC, UC).
    pub ah_attr: Option<AddressVector>,
    /// Path MTU: the largest payload of one packet (RC, UC).
    pub path_mtu: Option<Mtu>,
    /// Local ACK timeout: 4.096 µs × 2^timeout; 0 waits forever.
    pub timeout: Option<u8>,
    /// Retry count for transport errors (ACK timeouts, sequence NAKs) before the WR fails
    /// with `RetryExcErr` (0-7).
    pub retry_cnt: Option<u8>,
    /// 7 retries forever.
    pub rnr_retry: Option<u8>,
    /// Receive PSN: the PSN expected on the first incoming request (24-bit).
    pub rq_psn: Option<u32>,
    /// Max outstanding RDMA READ/atomic requests this QP initiates (initiator depth).
    pub max_rd_atomic: Option<u8>,
    /// Minimum RNR NAK timer the responder tells requesters to wait (IBA 5-bit code, 0-31).
    pub min_rnr_timer: Option<u8>,
    /// Send PSN: the PSN of the first request packet the QP sends (24-bit).
    pub sq_psn: Option<u32>,
    /// Max incoming RDMA READ/atomic requests the responder handles at once (responder
    /// resources).
    pub max_dest_rd_atomic: Option<u8>,
    /// Remote QP number (24-bit) of an RC or UC peer.
    pub dest_qp_num: Option<u32>,
}

/// `enum ibv_qp_attr_mask` bits, used to name attributes and describe the transition table.
pub mod mask {
    /// `IBV_QP_STATE`: the `qp_state` attribute.
    pub const STATE: u32 = 1 << 0;
    /// `IBV_QP_CUR_STATE`: the `cur_qp_state` attribute.
    pub const CUR_STATE: u32 = 1 << 1;
    /// `IBV_QP_ACCESS_FLAGS`: the `qp_access_flags` attribute.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`: the `pkey_index` attribute.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `IBV_QP_PORT`: the `port_num` attribute.
    pub const PORT: u32 = 1 << 5;
    /// `IBV_QP_QKEY`: the `qkey` attribute.
    pub const QKEY: u32 = 1 << 6;
    /// `IBV_QP_AV`: the `ah_attr` attribute.
    pub const AV: u32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`: the `path_mtu` attribute.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`: the `timeout` attribute.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`: the `retry_cnt` attribute.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`: the `rnr_retry` attribute.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`: the `rq_psn` attribute.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`: the `max_rd_atomic` attribute.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `IBV_QP_MIN_RNR_TIMER`: the `min_rnr_timer` attribute.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`: the `sq_psn` attribute.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`: the `max_dest_rd_atomic` attribute.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `IBV_QP_DEST_QPN`: the `dest_qp_num` attribute.
    pub const DEST_QPN: u32 = 1 << 20;
    /// Every bit a `QpAttr` can carry.
    pub const CARRIED: u32 = STATE
        | CUR_STATE
        | ACCESS_FLAGS
        | PKEY_INDEX
        | PORT
        | QKEY
        | AV
        | PATH_MTU
        | TIMEOUT
        | RETRY_CNT
        | RNR_RETRY
        | RQ_PSN
        | MAX_QP_RD_ATOMIC
        | MIN_RNR_TIMER
        | SQ_PSN
        | MAX_DEST_RD_ATOMIC
        | DEST_QPN;
}

const NAMES: [(u32, &str); 17] = [
    (mask::STATE, "qp_state"),
    (mask::CUR_STATE, "cur_qp_state"),
    (mask::ACCESS_FLAGS, "qp_access_flags"),
    (mask::PKEY_INDEX, "pkey_index"),
    (mask::PORT, "port_num"),
    (mask::QKEY, "qkey"),
    (mask::AV, "ah_attr"),
    (mask::PATH_MTU, "path_mtu"),
    (mask::TIMEOUT, "timeout"),
    (mask::RETRY_CNT, "retry_cnt"),
    (mask::RNR_RETRY, "rnr_retry"),
    (mask::RQ_PSN, "rq_psn"),
    (mask::MAX_QP_RD_ATOMIC, "max_rd_atomic"),
    (mask::MIN_RNR_TIMER, "min_rnr_timer"),
    (mask::SQ_PSN, "sq_psn"),
    (mask::MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic"),
    (mask::DEST_QPN, "dest_qp_num"),
];

fn names(bits: u32) -> String {
    NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

impl QpAttr {
    /// The libibverbs attribute mask these attributes correspond to.
    pub fn mask(&self) -> u32 {
        let mut m = 0;
        let mut set = |on: bool, bit: u32| {
            if on {
                m |= bit;
            }
        };
        set(self.qp_state.is_some(), mask::STATE);
        set(self.cur_qp_state.is_some(), mask::CUR_STATE);
        set(self.qp_access_flags.is_some(), mask::ACCESS_FLAGS);
        set(self.pkey_index.is_some(), mask::PKEY_INDEX);
        set(self.port_num.is_some(), mask::PORT);
        set(self.qkey.is_some(), mask::QKEY);
        set(self.ah_attr.is_some(), mask::AV);
        set(self.path_mtu.is_some(), mask::PATH_MTU);
        set(self.timeout.is_some(), mask::TIMEOUT);
        set(self.retry_cnt.is_some(), mask::RETRY_CNT);
        set(self.rnr_retry.is_some(), mask::RNR_RETRY);
        set(self.rq_psn.is_some(), mask::RQ_PSN);
        set(self.max_rd_atomic.is_some(), mask::MAX_QP_RD_ATOMIC);
        set(self.min_rnr_timer.is_some(), mask::MIN_RNR_TIMER);
        set(self.sq_psn.is_some(), mask::SQ_PSN);
        set(self.max_dest_rd_atomic.is_some(), mask::MAX_DEST_RD_ATOMIC);
        set(self.dest_qp_num.is_some(), mask::DEST_QPN);
        m
    }
}

/// (required, optional) attributes for `from -> to` on a QP of type `t`, or None when the
/// transition does not exist. STATE itself is not listed.
fn transition(t: QpType, from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let rc = t == QpType::Rc;
    let ud = t == QpType::Ud;
    let rtr_req = if ud {
        0
    } else {
        AV | PATH_MTU | DEST_QPN | RQ_PSN
    };
    let rtr_rc = if rc {
        MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
    } else {
        0
    };
    let rts_rc = if rc {
        TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC
    } else {
        0
    };
    let key = if ud { QKEY } else { ACCESS_FLAGS };
    let live_opt = CUR_STATE
        | if ud {
            QKEY
        } else {
            ACCESS_FLAGS | if rc { MIN_RNR_TIMER } else { 0 }
        };
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (PKEY_INDEX | PORT | key, 0),
        (Init, Init) => (0, PKEY_INDEX | PORT | key),
        (Init, Rtr) => (rtr_req | rtr_rc, PKEY_INDEX | key),
        (Rtr, Rts) => (SQ_PSN | rts_rc, live_opt),
        (Rts, Rts) | (Sqd, Rts) => (0, live_opt),
        (Sqe, Rts) if !rc => (0, live_opt),
        (Rts, Sqd) => (0, 0),
        (Sqd, Sqd) => (
            0,
            live_opt | AV | PATH_MTU | rts_rc | if rc { MAX_DEST_RD_ATOMIC } else { 0 },
        ),
        _ => return None,
    })
}

/// Limits a modify-QP call is checked against.
#[derive(Debug, Clone, Copy)]
pub struct AttrLimits {
    pub max_rd_atomic: u8,
    pub max_mtu: Mtu,
}

/// Checks `attr` for a QP of type `t` currently in `cur`; returns the target state.
pub fn validate(t: QpType, cur: QpState, attr: &QpAttr, lim: AttrLimits) -> Result<QpState> {
    let to = attr.qp_state.unwrap_or(cur);
    let bad = |what: String| VerbsError::InvalidTransition {
        from: cur,
        to,
        what,
    };
    if let Some(c) = attr.cur_qp_state {
        if c != cur {
            return Err(bad(format!("cur_qp_state says {c:?}")));
        }
    }
    let (req, opt) = transition(t, cur, to).ok_or_else(|| bad("no such transition".into()))?;
    let given = attr.mask() & !mask::STATE;
    let missing = req & !given;
    if missing != 0 {
        return Err(bad(format!("missing {}", names(missing))));
    }
    let extra = given & !(req | opt);
    if extra != 0 {
        return Err(bad(format!("not allowed: {}", names(extra))));
    }
    let range = |v: Option<u8>, max: u8, what: &'static str| match v {
        Some(v) if v > max => Err(VerbsError::InvalidArgument(what)),
        _ => Ok(()),
    };
    range(attr.timeout, 31, "timeout must be 0..=31")?;
    range(attr.retry_cnt, 7, "retry_cnt must be 0..=7")?;
    range(attr.rnr_retry, 7, "rnr_retry must be 0..=7")?;
    range(attr.min_rnr_timer, 31, "min_rnr_timer must be 0..=31")?;
    range(
        attr.max_rd_atomic,
        lim.max_rd_atomic,
        "max_rd_atomic above the device limit",
    )?;
    range(
        attr.max_dest_rd_atomic,
        lim.max_rd_atomic,
        "max_dest_rd_atomic above the device limit",
    )?;
    if attr.path_mtu.is_some_and(|m| m > lim.max_mtu) {
        return Err(VerbsError::InvalidArgument("path_mtu above the port's MTU"));
    }
    if attr.rq_psn.is_some_and(|p| p >= 1 << 24) || attr.sq_psn.is_some_and(|p| p >= 1 << 24) {
        return Err(VerbsError::InvalidArgument("PSNs are 24-bit"));
    }
    if attr.dest_qp_num.is_some_and(|q| q >= 1 << 24) {
        return Err(VerbsError::InvalidArgument("dest_qp_num is 24-bit"));
    }
    if attr
        .qp_access_flags
        .is_some_and(|a| !Access::ALL.contains(a))
    {
        return Err(VerbsError::InvalidArgument("unknown access flags"));
    }
    if attr.port_num.is_some_and(|p| p != 1) {
        return Err(VerbsError::InvalidArgument("port_num must be 1"));
    }
    if attr.pkey_index.is_some_and(|p| p != 0) {
        return Err(VerbsError::InvalidArgument("pkey_index must be 0"));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: AttrLimits = AttrLimits {
        max_rd_atomic: 16,
        max_mtu: Mtu::Mtu4096,
    };

    fn init() -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(Access::REMOTE_WRITE),
            ..Default::default()
        }
    }

    #[test]
    fn reset_to_init_needs_its_attributes() {
        assert_eq!(
            validate(QpType::Rc, QpState::Reset, &init(), LIM),
            Ok(QpState::Init)
        );
        let mut a = init();
        a.port_num = None;
        let e = validate(QpType::Rc, QpState::Reset, &a, LIM).unwrap_err();
        assert!(e.to_string().contains("missing port_num"), "{e}");
        let mut a = init();
        a.sq_psn = Some(1);
        let e = validate(QpType::Rc, QpState::Reset, &a, LIM).unwrap_err();
        assert!(e.to_string().contains("not allowed: sq_psn"), "{e}");
    }

    #[test]
    fn impossible_transitions_and_ranges() {
        let a = QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        };
        assert!(validate(QpType::Rc, QpState::Reset, &a, LIM).is_err());
        assert!(validate(QpType::Rc, QpState::Init, &a, LIM).is_err());
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(5),
            timeout: Some(14),
            retry_cnt: Some(8),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        };
        assert_eq!(
            validate(QpType::Rc, QpState::Rtr, &rts, LIM),
            Err(VerbsError::InvalidArgument("retry_cnt must be 0..=7"))
        );
        let ok = QpAttr {
            retry_cnt: Some(7),
            ..rts
        };
        assert_eq!(
            validate(QpType::Rc, QpState::Rtr, &ok, LIM),
            Ok(QpState::Rts)
        );
        let big = QpAttr {
            max_rd_atomic: Some(17),
            ..ok
        };
        assert!(validate(QpType::Rc, QpState::Rtr, &big, LIM).is_err());
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        assert_eq!(
            validate(QpType::Rc, QpState::Rts, &err, LIM),
            Ok(QpState::Err)
        );
        let wrong_cur = QpAttr {
            cur_qp_state: Some(QpState::Init),
            ..err
        };
        assert!(validate(QpType::Rc, QpState::Rts, &wrong_cur, LIM).is_err());
    }
}
