//! An iWARP QP's view of its device's registered memory: local SGEs by lkey within its
//! PD, remote accesses by STag (a region's rkey, or a window bound to one) with the
//! rights both the buffer and the QP grant, the tagged offset being the virtual address
//! (as siw and iWARP NICs take it).

use super::qp::{AccessError, Memory};
use crate::keys::MrTable;
use crate::srq::Srq;
use crate::verbs::{Access, AsyncEvent, WcStatus};
use crate::wr::{RecvWr, Sge};
use std::collections::{BTreeMap, VecDeque};

/// The memory QP `qpn` of PD `pd` may touch, and the remote rights it grants
/// (`qp_access_flags`); the SRQ it receives from, if any.
pub(crate) struct Registered<'a> {
    pub mrs: &'a mut MrTable,
    pub pd: u32,
    pub qpn: u32,
    pub qp_access: Access,
    pub srq: Option<SharedRq<'a>>,
}

/// An SRQ a QP takes receives from: its number, the queue, and where its limit event goes.
pub(crate) struct SharedRq<'a> {
    pub id: u32,
    pub srqs: &'a mut BTreeMap<u32, Srq>,
    pub events: &'a mut VecDeque<AsyncEvent>,
}

impl Registered<'_> {
    /// Buffer and offset of `len` bytes at `to` of `stag`, for an access needing `need`.
    fn remote(
        &self,
        stag: u32,
        to: u64,
        len: usize,
        need: Access,
    ) -> Result<(&crate::SharedBuffer, usize), AccessError> {
        let Some(range) = self.mrs.remote_range(self.pd, self.qpn, stag, need) else {
            // A key in use whose PD, QP or rights refuse this access, or no such key.
            return Err(if self.mrs.key_taken(stag) {
                AccessError::Rights
            } else {
                AccessError::InvalidStag
            });
        };
        if !self.qp_access.contains(need) {
            return Err(AccessError::Rights);
        }
        let (buffer, off) = range.at(to, len as u64).ok_or(AccessError::Bounds)?;
        Ok((buffer.as_ref(), off))
    }
}

impl Memory for Registered<'_> {
    fn gather(&self, sges: &[Sge], at: usize, out: &mut [u8]) -> Result<(), WcStatus> {
        self.mrs.gather_at(self.pd, sges, Access::empty(), at, out)
    }

    fn scatter(&mut self, sges: &[Sge], at: usize, data: &[u8]) -> Result<(), WcStatus> {
        self.mrs
            .scatter_at(self.pd, sges, Access::LOCAL_WRITE, at, data)
    }

    fn place(&mut self, stag: u32, to: u64, data: &[u8]) -> Result<(), AccessError> {
        let (buffer, off) = self.remote(stag, to, data.len(), Access::REMOTE_WRITE)?;
        buffer
            .write(off, data)
            .then_some(())
            .ok_or(AccessError::Bounds)
    }

    fn fetch(&self, stag: u32, to: u64, out: &mut [u8]) -> Result<(), AccessError> {
        let (buffer, off) = self.remote(stag, to, out.len(), Access::REMOTE_READ)?;
        buffer
            .read(off, out)
            .then_some(())
            .ok_or(AccessError::Bounds)
    }

    fn invalidate(&mut self, stag: u32) -> Result<(), AccessError> {
        self.mrs
            .invalidate(self.pd, stag, Some(self.qpn))
            .then_some(())
            .ok_or(AccessError::InvalidStag)
    }

    fn shared_recv(&mut self) -> Option<RecvWr> {
        let s = self.srq.as_mut()?;
        s.srqs.get_mut(&s.id)?.take(s.id, s.events)
    }
}
