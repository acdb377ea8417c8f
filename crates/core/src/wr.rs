//! Work requests and work completions.

use crate::gid::Gid;
use crate::verbs::{SendFlags, WcOpcode, WcStatus, WrOpcode};

/// A scatter/gather element: `length` bytes at virtual address `addr` of the memory region
/// whose local key is `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address of the first byte, as the region names it (its iova).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region the bytes lie in.
    pub lkey: u32,
}

/// A work request's scatter/gather list. Up to four SGEs live in the WR itself, so posting
/// the usual WR allocates nothing (`vec![..].into()` or `SgeList::from_slice` make one).
pub type SgeList = smallvec::SmallVec<[Sge; 4]>;

/// Inline data of a send WR: up to 64 bytes live in the WR itself.
pub type InlineData = smallvec::SmallVec<[u8; 64]>;

/// Where the data of a send WR comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendData {
    /// Gathered from registered memory when the WR is executed.
    Sges(SgeList),
    /// Copied at post time (`IBV_SEND_INLINE`); no memory registration needed.
    Inline(InlineData),
}

/// `struct ibv_send_wr`, one WR at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// The caller's ID, returned in the WR's completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// `IBV_SEND_*` flags (SIGNALED, INLINE, FENCE, SOLICITED).
    pub flags: SendFlags,
    /// Local data: what is sent or written, or where a READ's data or an atomic's original
    /// value lands.
    pub data: SendData,
    /// Immediate data (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM), as the big-endian reading of the
    /// four bytes on the wire.
    pub imm: u32,
    /// Remote address and key (RDMA and atomic operations).
    pub remote_addr: u64,
    /// Remote key of the target memory (RDMA and atomic operations).
    pub rkey: u32,
    /// FETCH_ADD addend, or COMPARE_SWAP compare value.
    pub compare_add: u64,
    /// COMPARE_SWAP swap value.
    pub swap: u64,
    /// Where a UD send goes (`wr.ud` in libibverbs); ignored by connected QPs.
    pub ud: Option<UdDest>,
    /// The rkey SEND_WITH_INV and LOCAL_INV invalidate.
    pub invalidate_rkey: u32,
    /// What BIND_MW binds.
    pub bind: Option<MwBind>,
}

/// A memory window binding (`struct ibv_mw_bind_info` plus the window and its new rkey).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    /// The window, as `Engine::alloc_mw` named it.
    pub mw: u32,
    /// The window's rkey after the bind: same upper 24 bits, a new low byte.
    pub rkey: u32,
    /// The memory region the window opens part of (its lkey); length 0 unbinds (type 1).
    pub lkey: u32,
    /// Start of the window, as an address of the region (its iova).
    pub addr: u64,
    /// Length of the window in bytes.
    pub length: u64,
    /// Remote rights through the window (REMOTE_READ/WRITE/ATOMIC).
    pub access: crate::verbs::Access,
}

/// The destination of a UD send: an address handle, the remote QP and its Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// From `Engine::create_ah`.
    pub ah: u32,
    /// The destination QP number.
    pub remote_qpn: u32,
    /// With bit 31 set, the sending QP's own Q_Key is used instead (as the spec says).
    pub remote_qkey: u32,
}

impl SendWr {
    /// A WR with everything but the opcode and data zero.
    pub fn new(wr_id: u64, opcode: WrOpcode, data: SendData) -> Self {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            data,
            imm: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            invalidate_rkey: 0,
            bind: None,
        }
    }
    /// Total bytes of the WR's data.
    pub fn length(&self) -> u64 {
        match &self.data {
            SendData::Sges(s) => s.iter().map(|s| u64::from(s.length)).sum(),
            SendData::Inline(v) => v.len() as u64,
        }
    }
}

/// `struct ibv_recv_wr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// The caller's ID, returned in the receive's completion.
    pub wr_id: u64,
    /// Where the incoming message is placed, in order.
    pub sges: SgeList,
}

/// `struct ibv_wc`, the fields oxrdma fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// ID of the work request that completed.
    pub wr_id: u64,
    /// Whether it succeeded, and if not, why.
    pub status: WcStatus,
    /// What kind of work completed.
    pub opcode: WcOpcode,
    /// Bytes received (receive completions, READ) or sent.
    pub byte_len: u32,
    /// Immediate data, when the message carried some.
    pub imm: Option<u32>,
    /// The QP this completion belongs to.
    pub qp_num: u32,
    /// Source QP (receive completions).
    pub src_qp: u32,
    /// Source GID of a UD receive (also in the 40-byte GRH area at the buffer's start).
    pub src_gid: Option<Gid>,
    /// The rkey a SEND_WITH_INV invalidated here (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
}

/// A work request that completed in error: its ID and status (`WorkCompletion::result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {wr_id} completed with {status} ({status:?})")]
pub struct WcError {
    /// ID of the work request that failed.
    pub wr_id: u64,
    /// Its completion status.
    pub status: crate::WcStatus,
}

impl WorkCompletion {
    /// The completion if its work request succeeded, else the error (its ID and status),
    /// so `?` ends a caller's work at the first failure.
    pub fn result(self) -> Result<WorkCompletion, WcError> {
        match self.status {
            crate::WcStatus::Success => Ok(self),
            status => Err(WcError {
                wr_id: self.wr_id,
                status,
            }),
        }
    }

    /// The completion of `wr_id` on QP `qp_num`, with no length, immediate or source; set
    /// those with struct update syntax.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm: None,
            qp_num,
            src_qp: 0,
            src_gid: None,
            invalidated_rkey: None,
        }
    }
}

#[cfg(test)]
mod result_tests {
    use super::*;
    use crate::{WcOpcode, WcStatus};

    #[test]
    fn a_completion_in_error_is_an_err_naming_its_request() {
        let ok = WorkCompletion::new(7, WcStatus::Success, WcOpcode::Send, 1);
        assert_eq!(ok.result().map(|w| w.wr_id), Ok(7));
        let bad = WorkCompletion::new(9, WcStatus::RetryExcErr, WcOpcode::RdmaWrite, 1);
        let e = bad.result().unwrap_err();
        assert_eq!((e.wr_id, e.status), (9, WcStatus::RetryExcErr));
        assert_eq!(
            e.to_string(),
            "work request 9 completed with transport retry counter exceeded (RetryExcErr)"
        );
    }
}
