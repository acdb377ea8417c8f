//! Memory windows: remote access to part of a memory region under an rkey of its own,
//! granted by a bind and withdrawn by invalidation, rebinding or deallocation.

use crate::mr::Regions;
use crate::verbs::{Access, MwType, WcStatus};
use crate::wr::MwBind;
use rustc_hash::FxHashMap as HashMap;

/// A memory window.
#[derive(Debug, Clone)]
pub(crate) struct Mw {
    pub pd: u32,
    pub mw_type: MwType,
    /// The current rkey: the window's index in the upper 24 bits, a key byte below.
    pub rkey: u32,
    pub binding: Option<Binding>,
}

/// What a bound window opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding {
    pub lkey: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    /// Type 2: the only QP that may use the window.
    pub qpn: Option<u32>,
}

/// Every memory window of a device, by handle and by current rkey.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    mws: HashMap<u32, Mw>,
    mw_rkeys: HashMap<u32, u32>,
}

impl Windows {
    pub fn len(&self) -> usize {
        self.mws.len()
    }

    /// True when `key` is a window's current rkey.
    pub fn key_taken(&self, key: u32) -> bool {
        self.mw_rkeys.contains_key(&key)
    }

    /// Adds a window with rkey `rkey` (its handle is the rkey's index, `rkey >> 8`).
    pub fn insert_mw(&mut self, mw: Mw) -> u32 {
        let handle = mw.rkey >> 8;
        self.mw_rkeys.insert(mw.rkey, handle);
        self.mws.insert(handle, mw);
        handle
    }

    pub fn mw_index_taken(&self, index: u32) -> bool {
        self.mws.contains_key(&index)
    }

    pub fn remove_mw(&mut self, handle: u32) -> Option<Mw> {
        let mw = self.mws.remove(&handle)?;
        self.mw_rkeys.remove(&mw.rkey);
        Some(mw)
    }

    pub fn mw(&self, handle: u32) -> Option<&Mw> {
        self.mws.get(&handle)
    }

    /// Windows bound to the region with `lkey` (it cannot be deregistered while any are).
    pub fn windows_on(&self, lkey: u32) -> usize {
        self.mws
            .values()
            .filter(|w| w.binding.is_some_and(|b| b.lkey == lkey))
            .count()
    }

    /// Executes a bind posted on QP `qpn` of PD `pd` (IBA 10.6.7.2, as rxe checks it), on a
    /// region of `regions`.
    pub fn bind_mw(
        &mut self,
        regions: &Regions,
        pd: u32,
        qpn: u32,
        b: &MwBind,
    ) -> Result<(), WcStatus> {
        let err = Err(WcStatus::MwBindErr);
        let Some(mw) = self.mws.get(&b.mw) else {
            return err;
        };
        if mw.pd != pd || (mw.rkey & !0xff) != (b.rkey & !0xff) {
            return err;
        }
        if mw.mw_type == MwType::Type2 && mw.binding.is_some() {
            // A type 2 window must be invalidated before it is bound again.
            return err;
        }
        // Local access bits mean nothing on a window but are allowed (rdma-core's tests bind
        // with LOCAL_WRITE | REMOTE_WRITE; rxe takes any access it supports on a region).
        if !Access::ALL.contains(b.access) {
            return err;
        }
        let binding = if b.length == 0 && mw.mw_type == MwType::Type1 {
            None // a zero-length bind of a type 1 window unbinds it
        } else {
            let Some(mr) = regions.get(b.lkey) else {
                return err;
            };
            let writes = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC);
            if mr.pd != pd
                || !mr.access.contains(Access::MW_BIND)
                || mr.offset_of(b.addr, b.length).is_none()
                || (b.access.intersects(writes) && !mr.access.contains(Access::LOCAL_WRITE))
            {
                return err;
            }
            Some(Binding {
                lkey: b.lkey,
                addr: b.addr,
                len: b.length,
                access: b.access,
                qpn: (mw.mw_type == MwType::Type2).then_some(qpn),
            })
        };
        let old = mw.rkey;
        if old != b.rkey && (self.key_taken(b.rkey) || regions.key_taken(b.rkey)) {
            return err;
        }
        let mw = self.mws.get_mut(&b.mw).expect("looked up above");
        mw.rkey = b.rkey;
        mw.binding = binding;
        self.mw_rkeys.remove(&old);
        self.mw_rkeys.insert(b.rkey, b.mw);
        Ok(())
    }

    /// Invalidates the type 2 window with `rkey` in PD `pd` (LOCAL_INV, or SEND_WITH_INV
    /// arriving on QP `qpn`, which must be the one it is bound to).
    pub fn invalidate(&mut self, pd: u32, rkey: u32, qpn: Option<u32>) -> bool {
        let Some(&h) = self.mw_rkeys.get(&rkey) else {
            return false;
        };
        let mw = self.mws.get_mut(&h).expect("indexed windows exist");
        let ok = mw.pd == pd
            && mw.mw_type == MwType::Type2
            && mw
                .binding
                .is_some_and(|b| qpn.is_none_or(|q| b.qpn == Some(q)));
        if ok {
            mw.binding = None;
        }
        ok
    }

    /// Remote accesses through the window whose rkey is `rkey`: the lkey of the region it
    /// opens and the addresses it opens there (`[lo, hi)`), or None if no access needing
    /// `need` is allowed (unbound, another PD, another QP for type 2, rights).
    pub fn remote(&self, pd: u32, qpn: u32, rkey: u32, need: Access) -> Option<(u32, u64, u64)> {
        let mw = self.mws.get(self.mw_rkeys.get(&rkey)?)?;
        let b = mw.binding?;
        if mw.pd != pd || b.qpn.is_some_and(|q| q != qpn) || !b.access.contains(need) {
            return None;
        }
        Some((b.lkey, b.addr, b.addr + b.len))
    }
}
