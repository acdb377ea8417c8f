//! The verbs vocabulary with libibverbs' names and numeric values, so a C layer can pass them
//! through unchanged.

use core::fmt;

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
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
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// `enum ibv_wr_opcode` (the ones oxrdma implements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WrOpcode {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
    AtomicCmpAndSwp = 5,
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
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

/// `enum ibv_qp_type` (the ones oxrdma implements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpType {
    Rc = 2,
    Uc = 3,
    Ud = 4,
}

/// `enum ibv_mtu`: IB path MTUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
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
        const LOCAL_WRITE = 1;
        const REMOTE_WRITE = 2;
        const REMOTE_READ = 4;
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
    pub const FENCE: SendFlags = SendFlags(1);
    pub const SIGNALED: SendFlags = SendFlags(2);
    pub const SOLICITED: SendFlags = SendFlags(4);
    pub const INLINE: SendFlags = SendFlags(8);

    pub const fn empty() -> SendFlags {
        SendFlags(0)
    }
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
    CqErr = 0,
    QpFatal = 1,
    QpReqErr = 2,
    QpAccessErr = 3,
    CommEst = 4,
    SqDrained = 5,
    SrqLimitReached = 15,
    QpLastWqeReached = 16,
}

/// An asynchronous event and the object it concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A completion queue overflowed (its completions are kept, but the CQ is in error).
    Cq { cq: u32, event: EventType },
    /// Something happened to a queue pair.
    Qp { qpn: u32, event: EventType },
    /// A shared receive queue fell below its armed limit.
    Srq { srq: u32, event: EventType },
}

#[cfg(test)]
mod tests {
    use super::*;

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
