//! Typed constructors of send work requests: each takes what its operation needs (the
//! local SGEs, a [`RemoteBuf`] that carries the rkey) and checks it then, so a WR that
//! could only fail on the wire is an `Err` before it is posted.
//!
//! ```
//! use oxrdma_core::{RemoteBuf, SendWr, Sge, WrOpcode};
//! let local = Sge { addr: 0x1000, length: 64, lkey: 7 };
//! let remote = RemoteBuf::new(0x9000, 0x55, 64).unwrap();
//! let w = SendWr::write(1, [local], remote).unwrap().with_imm(42).unwrap();
//! assert_eq!((w.opcode, w.rkey, w.imm), (WrOpcode::RdmaWriteWithImm, 0x55, 42));
//! // 65 bytes do not fit in 64, and a READ has no immediate: errors now, not on the wire.
//! assert!(SendWr::write(2, [Sge { length: 65, ..local }], remote).is_err());
//! assert!(SendWr::read(3, [local], remote).unwrap().with_imm(1).is_err());
//! ```

use crate::error::{Result, VerbsError};
use crate::remote::RemoteBuf;
use crate::verbs::{SendFlags, WrOpcode};
use crate::wr::{SendData, SendWr, Sge, SgeList, UdDest};

fn sges(local: impl AsRef<[Sge]>) -> SgeList {
    SgeList::from_slice(local.as_ref())
}

fn total(local: &SgeList) -> u64 {
    local.iter().map(|s| u64::from(s.length)).sum()
}

/// `remote` must hold `len` bytes.
fn fits(len: u64, remote: &RemoteBuf, what: &'static str) -> Result<()> {
    if len > remote.len() {
        return Err(VerbsError::InvalidArgument(what));
    }
    Ok(())
}

/// An atomic's operands: 8 bytes here, 8 aligned bytes there.
fn atomic_operands(local: &Sge, remote: &RemoteBuf) -> Result<()> {
    if local.length != 8 {
        return Err(VerbsError::InvalidArgument(
            "an atomic's local SGE is 8 bytes (the original value lands there)",
        ));
    }
    if remote.len() < 8 || !remote.addr().is_multiple_of(8) {
        return Err(VerbsError::InvalidArgument(
            "an atomic's target is 8 bytes at an 8-byte-aligned address",
        ));
    }
    Ok(())
}

impl SendWr {
    /// RDMA WRITE of the bytes `local` gathers to the start of `remote` (signaled). An
    /// error if they do not fit there.
    pub fn write(wr_id: u64, local: impl AsRef<[Sge]>, remote: RemoteBuf) -> Result<SendWr> {
        let local = sges(local);
        fits(
            total(&local),
            &remote,
            "a WRITE longer than its remote buffer",
        )?;
        Ok(SendWr {
            remote_addr: remote.addr(),
            rkey: remote.rkey(),
            ..SendWr::new(wr_id, WrOpcode::RdmaWrite, SendData::Sges(local))
        })
    }

    /// RDMA READ from the start of `remote` into `local`, as many bytes as `local` holds
    /// (signaled). An error if `remote` holds fewer.
    pub fn read(wr_id: u64, local: impl AsRef<[Sge]>, remote: RemoteBuf) -> Result<SendWr> {
        let local = sges(local);
        fits(
            total(&local),
            &remote,
            "a READ longer than its remote buffer",
        )?;
        Ok(SendWr {
            remote_addr: remote.addr(),
            rkey: remote.rkey(),
            ..SendWr::new(wr_id, WrOpcode::RdmaRead, SendData::Sges(local))
        })
    }

    /// SEND of the bytes `local` gathers (signaled).
    pub fn send(wr_id: u64, local: impl AsRef<[Sge]>) -> SendWr {
        SendWr::new(wr_id, WrOpcode::Send, SendData::Sges(sges(local)))
    }

    /// SEND of `data` copied into the WR at post time (`IBV_SEND_INLINE`: no registered
    /// memory; up to the QP's `max_inline_data`, which the post checks).
    pub fn send_inline(wr_id: u64, data: &[u8]) -> SendWr {
        let mut w = SendWr::new(wr_id, WrOpcode::Send, SendData::Inline(data.into()));
        w.flags = w.flags | SendFlags::INLINE;
        w
    }

    /// Atomic compare-and-swap of the 8 bytes at the start of `remote`: if they equal
    /// `compare` they become `swap`; their value before lands in `local` (8 bytes).
    pub fn atomic_cas(
        wr_id: u64,
        local: Sge,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    ) -> Result<SendWr> {
        atomic_operands(&local, &remote)?;
        Ok(SendWr {
            remote_addr: remote.addr(),
            rkey: remote.rkey(),
            compare_add: compare,
            swap,
            ..SendWr::new(
                wr_id,
                WrOpcode::AtomicCmpAndSwp,
                SendData::Sges(sges([local])),
            )
        })
    }

    /// Atomic fetch-and-add of `add` to the 8 bytes at the start of `remote`; their value
    /// before lands in `local` (8 bytes).
    pub fn atomic_fetch_add(wr_id: u64, local: Sge, remote: RemoteBuf, add: u64) -> Result<SendWr> {
        atomic_operands(&local, &remote)?;
        Ok(SendWr {
            remote_addr: remote.addr(),
            rkey: remote.rkey(),
            compare_add: add,
            ..SendWr::new(
                wr_id,
                WrOpcode::AtomicFetchAndAdd,
                SendData::Sges(sges([local])),
            )
        })
    }

    /// The same WRITE or SEND carrying `imm` (RDMA WRITE with immediate: it consumes a
    /// receive at the peer). An error for other operations, which have no immediate form.
    pub fn with_imm(mut self, imm: u32) -> Result<SendWr> {
        self.opcode = match self.opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WrOpcode::RdmaWriteWithImm,
            WrOpcode::Send | WrOpcode::SendWithImm => WrOpcode::SendWithImm,
            _ => {
                return Err(VerbsError::InvalidArgument(
                    "only WRITE and SEND carry an immediate",
                ))
            }
        };
        self.imm = imm;
        Ok(self)
    }

    /// The same WR without a completion of its own when it succeeds (one that fails still
    /// completes; on a QP made with `sq_sig_all` every WR completes).
    #[must_use]
    pub fn unsignaled(mut self) -> SendWr {
        self.flags = SendFlags(self.flags.0 & !SendFlags::SIGNALED.0);
        self
    }

    /// The same SEND aimed at a UD destination (an address handle, the remote QP and its
    /// Q_Key); connected QPs ignore it.
    #[must_use]
    pub fn to(mut self, dest: UdDest) -> SendWr {
        self.ud = Some(dest);
        self
    }

    /// The same WR asking the peer's completion channel to wake on it (`IBV_SEND_SOLICITED`).
    #[must_use]
    pub fn solicited(mut self) -> SendWr {
        self.flags = self.flags | SendFlags::SOLICITED;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(addr: u64, length: u32) -> Sge {
        Sge {
            addr,
            length,
            lkey: 7,
        }
    }

    #[test]
    fn each_operation_carries_what_it_needs_and_refuses_what_cannot_work() {
        let remote = RemoteBuf::new(0x10_0000, 0xabcd, 4096).unwrap();
        let w = SendWr::write(1, [sge(0x2000, 4096)], remote).unwrap();
        assert_eq!(
            (w.opcode, w.remote_addr, w.rkey),
            (WrOpcode::RdmaWrite, 0x10_0000, 0xabcd)
        );
        assert!(w.flags.contains(SendFlags::SIGNALED));
        assert!(SendWr::write(1, [sge(0, 4000), sge(0, 97)], remote).is_err());
        let r = SendWr::read(2, vec![sge(0x2000, 96)], remote.slice(4000..).unwrap());
        assert_eq!(r.unwrap().remote_addr, 0x10_0000 + 4000);
        assert!(SendWr::read(2, [sge(0, 97)], remote.slice(4000..).unwrap()).is_err());

        let c = SendWr::atomic_cas(3, sge(0x3000, 8), remote, 1, 2).unwrap();
        assert_eq!((c.compare_add, c.swap), (1, 2));
        assert!(SendWr::atomic_cas(3, sge(0x3000, 4), remote, 1, 2).is_err());
        assert!(SendWr::atomic_fetch_add(3, sge(0, 8), remote.slice(4..).unwrap(), 1).is_err());
        assert!(
            SendWr::atomic_fetch_add(3, sge(0, 8), remote.slice(4088..4092).unwrap(), 1).is_err()
        );
        assert_eq!(
            SendWr::atomic_fetch_add(3, sge(0, 8), remote.slice(8..).unwrap(), 5)
                .unwrap()
                .opcode,
            WrOpcode::AtomicFetchAndAdd
        );

        let s = SendWr::send(4, [sge(0, 8)]).with_imm(9).unwrap();
        assert_eq!((s.opcode, s.imm), (WrOpcode::SendWithImm, 9));
        let wi = SendWr::write(5, [sge(0, 8)], remote)
            .unwrap()
            .with_imm(10)
            .unwrap();
        assert_eq!(wi.opcode, WrOpcode::RdmaWriteWithImm);
        let rd = SendWr::read(6, [sge(0, 8)], remote).unwrap();
        assert!(rd.with_imm(1).is_err(), "a READ has no immediate");
        let u = SendWr::send(7, [sge(0, 8)]).unsignaled().solicited();
        assert!(!u.flags.contains(SendFlags::SIGNALED) && u.flags.contains(SendFlags::SOLICITED));
        let i = SendWr::send_inline(8, b"tiny");
        assert!(i.flags.contains(SendFlags::INLINE));
        assert_eq!(i.length(), 4);
    }
}
