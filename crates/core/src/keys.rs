//! The key checks every memory access goes through: local SGEs by lkey, remote accesses by
//! the rkey of a region or of a memory window bound to one.

use crate::memory::SharedBuffer;
use crate::mr::{MemoryRegion, Regions, Segment};
use crate::mw::{Mw, Windows};
use crate::verbs::{Access, WcStatus};
use crate::wr::MwBind;
use std::sync::Arc;

/// The memory an rkey opens to remote accesses of one kind: a region, or the part of one a
/// window opens (`[lo, hi)`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteRange<'a> {
    pub rkey: u32,
    mr: &'a MemoryRegion,
    window: Option<(u64, u64)>,
}

impl<'a> RemoteRange<'a> {
    /// The memory and offset of `len` bytes at `va`, if they are in range.
    pub fn at(&self, va: u64, len: u64) -> Option<(&'a Arc<SharedBuffer>, usize)> {
        if let Some((lo, hi)) = self.window {
            let end = va.checked_add(len)?;
            if va < lo || end > hi {
                return None;
            }
        }
        Some((&self.mr.buffer, self.mr.offset_of(va, len)?))
    }
}

/// A device's regions and windows.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    regions: Regions,
    windows: Windows,
}

impl MrTable {
    pub fn insert(&mut self, mr: MemoryRegion) {
        self.regions.insert(mr);
    }
    pub fn remove(&mut self, lkey: u32) -> Option<MemoryRegion> {
        self.regions.remove(lkey)
    }
    /// True when `key` is already in use as an lkey or an rkey (of a region or a window).
    pub fn key_taken(&self, key: u32) -> bool {
        self.regions.key_taken(key) || self.windows.key_taken(key)
    }
    pub fn count_in_pd(&self, pd: u32) -> usize {
        self.regions.count_in_pd(pd)
    }
    pub fn count_all(&self) -> usize {
        self.regions.len()
    }

    /// Resolves a local SGE list for an access needing `need`; None on any bad key, PD,
    /// bounds or permission (→ LOC_PROT_ERR).
    pub fn local(&self, pd: u32, sges: &[crate::Sge], need: Access) -> Option<Vec<Segment>> {
        self.regions.local(pd, sges, need)
    }

    /// Copies a local SGE list's bytes from `at` on into `out` (see `Regions::gather_at`).
    pub fn gather_at(
        &self,
        pd: u32,
        sges: &[crate::Sge],
        need: Access,
        at: usize,
        out: &mut [u8],
    ) -> Result<(), WcStatus> {
        self.regions.gather_at(pd, sges, need, at, out)
    }

    /// Copies `data` into a local SGE list from `at` on (see `Regions::scatter_at`).
    pub fn scatter_at(
        &self,
        pd: u32,
        sges: &[crate::Sge],
        need: Access,
        at: usize,
        data: &[u8],
    ) -> Result<(), WcStatus> {
        self.regions.scatter_at(pd, sges, need, at, data)
    }

    /// What `rkey` (a region's or a window's) lets QP `qpn` of PD `pd` reach with accesses
    /// needing `need`, for [`RemoteRange::at`] to place each access (a run of packets naming
    /// one key resolves it once); None on any bad key, PD, QP or permission, as `at` on bad
    /// bounds (→ NAK remote access error).
    pub fn remote_range(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        need: Access,
    ) -> Option<RemoteRange<'_>> {
        if self.windows.key_taken(rkey) {
            let (lkey, lo, hi) = self.windows.remote(pd, qpn, rkey, need)?;
            let mr = self.regions.get(lkey)?;
            return Some(RemoteRange {
                rkey,
                mr,
                window: Some((lo, hi)),
            });
        }
        let mr = self.regions.by_rkey(rkey).filter(|m| m.pd == pd)?;
        mr.access.contains(need).then_some(RemoteRange {
            rkey,
            mr,
            window: None,
        })
    }

    pub fn insert_mw(&mut self, mw: Mw) -> u32 {
        self.windows.insert_mw(mw)
    }
    pub fn mw_index_taken(&self, index: u32) -> bool {
        self.windows.mw_index_taken(index)
    }
    pub fn remove_mw(&mut self, handle: u32) -> Option<Mw> {
        self.windows.remove_mw(handle)
    }
    pub fn mw(&self, handle: u32) -> Option<&Mw> {
        self.windows.mw(handle)
    }
    pub fn mw_count(&self) -> usize {
        self.windows.len()
    }
    /// Windows bound to the region with `lkey` (it cannot be deregistered while any are).
    pub fn windows_on(&self, lkey: u32) -> usize {
        self.windows.windows_on(lkey)
    }
    /// Executes a bind posted on QP `qpn` of PD `pd`.
    pub fn bind_mw(&mut self, pd: u32, qpn: u32, b: &MwBind) -> Result<(), WcStatus> {
        self.windows.bind_mw(&self.regions, pd, qpn, b)
    }
    /// Invalidates the type 2 window with `rkey` (see [`Windows::invalidate`]).
    pub fn invalidate(&mut self, pd: u32, rkey: u32, qpn: Option<u32>) -> bool {
        self.windows.invalidate(pd, rkey, qpn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SharedBuffer;
    use crate::mr::MemoryRegion;
    use crate::mw::Mw;
    use crate::verbs::MwType;
    use crate::wr::MwBind;
    use std::sync::Arc;

    fn table() -> MrTable {
        let mut t = MrTable::default();
        t.insert(MemoryRegion {
            pd: 1,
            buffer: Arc::new(SharedBuffer::new(4096).unwrap()),
            iova: 0x1000,
            access: Access::ALL,
            lkey: 0x10,
            rkey: 0x20,
        });
        t
    }

    #[test]
    fn a_type2_window_serves_only_the_qp_it_was_bound_on() {
        let mut t = table();
        let h = t.insert_mw(Mw {
            pd: 1,
            mw_type: MwType::Type2,
            rkey: 0xabcd_0001,
            binding: None,
        });
        let b = MwBind {
            mw: h,
            rkey: 0xabcd_0002,
            lkey: 0x10,
            addr: 0x1100,
            length: 0x100,
            access: Access::REMOTE_READ,
        };
        assert_eq!(t.bind_mw(1, 5, &b), Ok(()));
        let get = |t: &MrTable, qpn, rkey, va, len, need| {
            let range = t.remote_range(1, qpn, rkey, need);
            range.and_then(|r| r.at(va, len)).is_some()
        };
        assert!(get(&t, 5, 0xabcd_0002, 0x1100, 0x100, Access::REMOTE_READ));
        assert!(
            !get(&t, 6, 0xabcd_0002, 0x1100, 0x100, Access::REMOTE_READ),
            "another QP"
        );
        assert!(
            !get(&t, 5, 0xabcd_0001, 0x1100, 8, Access::REMOTE_READ),
            "the old rkey"
        );
        assert!(
            !get(&t, 5, 0xabcd_0002, 0x10ff, 8, Access::REMOTE_READ),
            "below the window"
        );
        assert!(
            !get(&t, 5, 0xabcd_0002, 0x1100, 8, Access::REMOTE_WRITE),
            "rights"
        );
        assert!(
            !t.invalidate(1, 0xabcd_0002, Some(6)),
            "SEND_WITH_INV from another QP"
        );
        assert!(t.invalidate(1, 0xabcd_0002, Some(5)));
        assert!(
            !get(&t, 5, 0xabcd_0002, 0x1100, 8, Access::REMOTE_READ),
            "invalidated"
        );
    }
}
