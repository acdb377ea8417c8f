//! The verbs vocabulary with libibverbs' names and numeric values, so a C layer can pass them
//! through unchanged.

use core::fmt;

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// The work request completed without error (`IBV_WC_SUCCESS`).
    Success = 0,
    /// Local length error: a message longer than its buffers or the allowed maximum
    /// (`IBV_WC_LOC_LEN_ERR`).
    LocLenErr = 1,
    /// Local QP operation error: the QP could not carry out the WR
    /// (`IBV_WC_LOC_QP_OP_ERR`).
    LocQpOpErr = 2,
    /// Local EE context operation error; RD only, which oxrdma does not implement
    /// (`IBV_WC_LOC_EEC_OP_ERR`).
    LocEecOpErr = 3,
    /// Local protection error: an SGE names memory the WR may not use (lkey, PD, range or
    /// access) (`IBV_WC_LOC_PROT_ERR`).
    LocProtErr = 4,
    /// Flushed: the WR was outstanding or posted while the QP was in the error state
    /// (`IBV_WC_WR_FLUSH_ERR`).
    WrFlushErr = 5,
    /// A memory window bind failed (`IBV_WC_MW_BIND_ERR`).
    MwBindErr = 6,
    /// Bad response: the responder answered with an unexpected opcode or length
    /// (`IBV_WC_BAD_RESP_ERR`).
    BadRespErr = 7,
    /// Local access error: a protection error on a local buffer while taking in an incoming
    /// message (`IBV_WC_LOC_ACCESS_ERR`).
    LocAccessErr = 8,
    /// Remote invalid request: the responder NAKed a request it cannot execute (opcode,
    /// length) (`IBV_WC_REM_INV_REQ_ERR`).
    RemInvReqErr = 9,
    /// Remote access error: the responder refused the rkey, address range or access rights
    /// (`IBV_WC_REM_ACCESS_ERR`).
    RemAccessErr = 10,
    /// Remote operational error: the responder could not complete the operation
    /// (`IBV_WC_REM_OP_ERR`).
    RemOpErr = 11,
    /// Transport retry counter exceeded: no ACK after `retry_cnt` resends
    /// (`IBV_WC_RETRY_EXC_ERR`).
    RetryExcErr = 12,
    /// RNR retry counter exceeded: the responder had no receive posted `rnr_retry` times
    /// (`IBV_WC_RNR_RETRY_EXC_ERR`).
    RnrRetryExcErr = 13,
    /// Local RDD violation; RD only (`IBV_WC_LOC_RDD_VIOL_ERR`).
    LocRddViolErr = 14,
    /// Remote invalid RD request; RD only (`IBV_WC_REM_INV_RD_REQ_ERR`).
    RemInvRdReqErr = 15,
    /// Remote aborted: the responder abandoned the operation (`IBV_WC_REM_ABORT_ERR`).
    RemAbortErr = 16,
    /// Invalid EE context number; RD only (`IBV_WC_INV_EECN_ERR`).
    InvEecnErr = 17,
    /// Invalid EE context state; RD only (`IBV_WC_INV_EEC_STATE_ERR`).
    InvEecStateErr = 18,
    /// Fatal device error (`IBV_WC_FATAL_ERR`).
    FatalErr = 19,
    /// Response timeout (`IBV_WC_RESP_TIMEOUT_ERR`).
    RespTimeoutErr = 20,
    /// Any other error (`IBV_WC_GENERAL_ERR`).
    GeneralErr = 21,
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ibv_wc_status_str() wording for the ones users meet.
        let s = match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            other => return write!(f, "{other:?}"),
        };
        f.write_str(s)
    }
}

/// `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// A SEND (with immediate or invalidate too) completed on the send queue
    /// (`IBV_WC_SEND`).
    Send = 0,
    /// An RDMA WRITE (with immediate too) completed (`IBV_WC_RDMA_WRITE`).
    RdmaWrite = 1,
    /// An RDMA READ completed (`IBV_WC_RDMA_READ`).
    RdmaRead = 2,
    /// An atomic compare-and-swap completed (`IBV_WC_COMP_SWAP`).
    CompSwap = 3,
    /// An atomic fetch-and-add completed (`IBV_WC_FETCH_ADD`).
    FetchAdd = 4,
    /// A memory window bind completed (`IBV_WC_BIND_MW`).
    BindMw = 5,
    /// A local invalidate completed (`IBV_WC_LOCAL_INV`).
    LocalInv = 6,
    /// A receive WR took an incoming SEND (`IBV_WC_RECV`).
    Recv = 128,
    /// A receive WR was consumed by an incoming RDMA WRITE with immediate
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RecvRdmaWithImm = 129,
}

/// `enum ibv_wr_opcode` (the ones oxrdma implements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WrOpcode {
    /// RDMA WRITE to remote memory (`IBV_WR_RDMA_WRITE`).
    RdmaWrite = 0,
    /// RDMA WRITE that also consumes a receive at the responder and hands it 32 bits of
    /// immediate data (`IBV_WR_RDMA_WRITE_WITH_IMM`).
    RdmaWriteWithImm = 1,
    /// SEND into the responder's next receive (`IBV_WR_SEND`).
    Send = 2,
    /// SEND with 32 bits of immediate data (`IBV_WR_SEND_WITH_IMM`).
    SendWithImm = 3,
    /// RDMA READ from remote memory (`IBV_WR_RDMA_READ`).
    RdmaRead = 4,
    /// Atomic 64-bit compare-and-swap on remote memory (`IBV_WR_ATOMIC_CMP_AND_SWP`).
    AtomicCmpAndSwp = 5,
    /// Atomic 64-bit fetch-and-add on remote memory (`IBV_WR_ATOMIC_FETCH_AND_ADD`).
    AtomicFetchAndAdd = 6,
    /// Invalidates a type 2 memory window's rkey (a local operation).
    LocalInv = 7,
    /// Binds a memory window to part of a memory region (a local operation).
    BindMw = 8,
    /// SEND that invalidates an rkey at the responder when it completes.
    SendWithInv = 9,
}

impl WrOpcode {
    /// The completion opcode a send-queue WR of this kind reports.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        }
    }
    /// READ and atomics: they wait for response data and count against max_rd_atomic.
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    /// Executed by the requester without sending anything.
    pub fn is_local(self) -> bool {
        matches!(self, WrOpcode::LocalInv | WrOpcode::BindMw)
    }
    /// Compare-and-swap or fetch-and-add.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
}

/// `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpState {
    /// Reset (RESET): the state a QP is created in; it neither sends nor receives.
    Reset = 0,
    /// Initialized (INIT): receives may be posted, but no packet is processed yet.
    Init = 1,
    /// Ready to receive (RTR).
    Rtr = 2,
    /// Ready to send (RTS).
    Rts = 3,
    /// Send queue drain (SQD): no new send WRs are started; SQ_DRAINED follows once the
    /// outstanding ones finish.
    Sqd = 4,
    /// Send queue error (SQE): a send WR failed on a UC or UD QP; receives go on.
    Sqe = 5,
    /// Error (ERR): outstanding and newly posted WRs complete with `WrFlushErr`.
    Err = 6,
}

/// `enum ibv_qp_type` (the ones oxrdma implements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc = 2,
    /// Unreliable connected (`IBV_QPT_UC`).
    Uc = 3,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud = 4,
}

/// `enum ibv_mtu`: IB path MTUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    /// 256 bytes (`IBV_MTU_256`).
    Mtu256 = 1,
    /// 512 bytes (`IBV_MTU_512`).
    Mtu512 = 2,
    /// 1024 bytes (`IBV_MTU_1024`).
    Mtu1024 = 3,
    /// 2048 bytes (`IBV_MTU_2048`).
    Mtu2048 = 4,
    /// 4096 bytes (`IBV_MTU_4096`).
    Mtu4096 = 5,
}

/// The value of a C enum (`enum ibv_*`) as one of oxrdma's, where they share numbering.
macro_rules! from_ibv {
    ($ty:ident: $($v:ident),* $(,)?) => {
        impl $ty {
            /// The value whose libibverbs number is `n` (None for numbers oxrdma lacks).
            pub fn from_ibv(n: u32) -> Option<$ty> {
                [$($ty::$v),*].into_iter().find(|v| *v as u32 == n)
            }
        }
    };
}

from_ibv!(WcStatus: Success, LocLenErr, LocQpOpErr, LocEecOpErr, LocProtErr, WrFlushErr,
    MwBindErr, BadRespErr, LocAccessErr, RemInvReqErr, RemAccessErr, RemOpErr, RetryExcErr,
    RnrRetryExcErr, LocRddViolErr, RemInvRdReqErr, RemAbortErr, InvEecnErr, InvEecStateErr,
    FatalErr, RespTimeoutErr, GeneralErr);
from_ibv!(WcOpcode: Send, RdmaWrite, RdmaRead, CompSwap, FetchAdd, BindMw, LocalInv, Recv,
    RecvRdmaWithImm);
from_ibv!(QpState: Reset, Init, Rtr, Rts, Sqd, Sqe, Err);

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> usize {
        128 << (self as u32)
    }
    /// The MTU of `bytes` bytes (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: usize) -> Option<Mtu> {
        (1..=5)
            .filter_map(Mtu::from_ibv)
            .find(|m| m.bytes() == bytes)
    }
    /// The MTU with libibverbs number `n` (1..=5).
    pub fn from_ibv(n: u32) -> Option<Mtu> {
        Some(match n {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

bitflags::bitflags! {
    /// `enum ibv_access_flags`, as a typed set (`Access::LOCAL_WRITE | Access::REMOTE_READ`).
    /// Bits from C that oxrdma does not name are kept (`from_bits_retain`) for the checks
    /// that refuse them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Access: u32 {
        /// The device may write the memory: receives, READ responses, atomic results
        /// (`IBV_ACCESS_LOCAL_WRITE`).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE to the memory (`IBV_ACCESS_REMOTE_WRITE`).
        const REMOTE_WRITE = 2;
        /// Peers may RDMA READ the memory (`IBV_ACCESS_REMOTE_READ`).
        const REMOTE_READ = 4;
        /// Peers may run atomic operations on the memory (`IBV_ACCESS_REMOTE_ATOMIC`).
        const REMOTE_ATOMIC = 8;
        /// Memory windows may be bound to the region.
        const MW_BIND = 16;
        /// Every flag oxrdma understands.
        const ALL = 0x1f;
        /// The rights a remote peer can be given.
        const REMOTE = 0xe;
    }
}

/// `enum ibv_send_flags`, as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// Start this WR only after earlier RDMA READ and atomic WRs have completed
    /// (`IBV_SEND_FENCE`).
    pub const FENCE: SendFlags = SendFlags(1);
    /// Generate a completion for this WR (`IBV_SEND_SIGNALED`).
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// Set the solicited event bit, to wake the responder's solicited-only CQ notification
    /// (`IBV_SEND_SOLICITED`).
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// Copy the data into the WR at post time; its SGEs need no lkey (`IBV_SEND_INLINE`).
    pub const INLINE: SendFlags = SendFlags(8);

    /// No flags.
    pub const fn empty() -> SendFlags {
        SendFlags(0)
    }
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// `enum ibv_mw_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MwType {
    /// Bound with `ibv_bind_mw`; usable by every QP of its PD; rebinding replaces it.
    Type1 = 1,
    /// Bound by a BIND_MW work request to one QP; must be invalidated before rebinding.
    Type2 = 2,
}

/// `enum ibv_event_type` (the ones the engine raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventType {
    /// A CQ overran (`IBV_EVENT_CQ_ERR`).
    CqErr = 0,
    /// QP fatal error: the QP went to the error state (`IBV_EVENT_QP_FATAL`).
    QpFatal = 1,
    /// Invalid request: the responder saw a request it cannot execute and the QP went to
    /// the error state (`IBV_EVENT_QP_REQ_ERR`).
    QpReqErr = 2,
    /// Access violation: a request broke the responder's access rights and the QP went to
    /// the error state (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessErr = 3,
    /// Communication established: the first packet arrived on a QP in RTR
    /// (`IBV_EVENT_COMM_EST`).
    CommEst = 4,
    /// The send queue of a QP in SQD has no outstanding WRs left (`IBV_EVENT_SQ_DRAINED`).
    SqDrained = 5,
    /// An SRQ holds fewer receives than its armed limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached = 15,
    /// A QP on an SRQ went to the error state and takes no more receives from it
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached = 16,
}

/// An asynchronous event and the object it concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A completion queue overflowed (its completions are kept, but the CQ is in error).
    Cq {
        /// The CQ's handle.
        cq: u32,
        /// The event (`CqErr`).
        event: EventType,
    },
    /// Something happened to a queue pair.
    Qp {
        /// The QP's number.
        qpn: u32,
        /// What happened to it.
        event: EventType,
    },
    /// A shared receive queue fell below its armed limit.
    Srq {
        /// The SRQ's handle.
        srq: u32,
        /// The event (`SrqLimitReached`).
        event: EventType,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_numbers_map_back_to_the_values_that_carry_them() {
        for n in 0..300 {
            if let Some(s) = WcStatus::from_ibv(n) {
                assert_eq!(s as u32, n);
            }
            if let Some(o) = WcOpcode::from_ibv(n) {
                assert_eq!(o as u32, n);
            }
        }
        assert_eq!(WcStatus::from_ibv(12), Some(WcStatus::RetryExcErr));
        assert_eq!(WcStatus::from_ibv(22), None);
        assert_eq!(WcOpcode::from_ibv(129), Some(WcOpcode::RecvRdmaWithImm));
        assert_eq!(WcOpcode::from_ibv(7), None);
        assert_eq!(QpState::from_ibv(6), Some(QpState::Err));
        assert_eq!(QpState::from_ibv(7), None);
    }

    #[test]
    fn libibverbs_numbers() {
        assert_eq!(WcStatus::WrFlushErr as u32, 5);
        assert_eq!(WcStatus::RemInvReqErr as u32, 9);
        assert_eq!(WcStatus::RetryExcErr as u32, 12);
        assert_eq!(WcStatus::RnrRetryExcErr as u32, 13);
        assert_eq!(WcOpcode::RecvRdmaWithImm as u32, 129);
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_ibv(6), None);
    }
}

/// How a device carries the verbs, as `struct ibv_device`'s node and transport types say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceTransport {
    /// InfiniBand's transport, which RoCE carries over UDP/IP (rxe, RoCE NICs): node type
    /// `IBV_NODE_CA`, transport `IBV_TRANSPORT_IB`.
    Ib,
    /// iWARP: RDMAP over TCP (siw, iWARP NICs): node type `IBV_NODE_RNIC`, transport
    /// `IBV_TRANSPORT_IWARP`.
    Iwarp,
}

impl DeviceTransport {
    /// `enum ibv_node_type`: 1 (CA) or 4 (RNIC).
    pub fn node_type(self) -> u32 {
        match self {
            DeviceTransport::Ib => 1,
            DeviceTransport::Iwarp => 4,
        }
    }

    /// `enum ibv_transport_type`: 0 (IB) or 1 (iWARP).
    pub fn transport_type(self) -> u32 {
        match self {
            DeviceTransport::Ib => 0,
            DeviceTransport::Iwarp => 1,
        }
    }

    /// From `ibv_transport_type` (None for the others: usNIC, unspecified).
    pub fn from_transport_type(t: u32) -> Option<Self> {
        match t {
            0 => Some(DeviceTransport::Ib),
            1 => Some(DeviceTransport::Iwarp),
            _ => None,
        }
    }
}
