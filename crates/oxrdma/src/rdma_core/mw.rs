//! Memory windows on an rdma-core device. A bind names its window and region by the
//! API's numbers (`MwBind`: the window's handle, the region's lkey) where verbs takes their
//! pointers, so each PD keeps both tables (`Keys`); an entry goes before its object does.

use super::objects::Pd;
use super::verbs::check;
use crate::error::{Error, Result};
use crate::lock::lock;
use oxrdma_core::{MwBind, MwType, SendFlags, VerbsError};
use oxrdma_verbs_abi::*;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A PD's regions by lkey and windows by handle, for binds.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    mrs: HashMap<u32, MrPtr>,
    mws: HashMap<u32, Weak<Mw>>,
}

#[derive(Debug, Clone, Copy)]
struct MrPtr(NonNull<ibv_mr>);
// SAFETY: a registration's address, used only under the table's lock while it lives.
unsafe impl Send for MrPtr {}

impl Keys {
    pub fn add_mr(keys: &Mutex<Keys>, lkey: u32, mr: NonNull<ibv_mr>) {
        lock(keys).mrs.insert(lkey, MrPtr(mr));
    }

    pub fn remove_mr(keys: &Mutex<Keys>, lkey: u32) {
        lock(keys).mrs.remove(&lkey);
    }

    /// The window and region `bind` names, for as long as the guard is held.
    fn find(&self, bind: &MwBind) -> Result<(Arc<Mw>, *mut ibv_mr)> {
        let mw = self.mws.get(&bind.mw).and_then(Weak::upgrade);
        let mw = mw.ok_or(VerbsError::NotFound("memory window"))?;
        let mr = match (bind.length, self.mrs.get(&bind.lkey)) {
            (_, Some(p)) => p.0.as_ptr(),
            // Unbinding a type 1 window names no region.
            (0, None) => std::ptr::null_mut(),
            (_, None) => return Err(VerbsError::NotFound("memory region").into()),
        };
        Ok((mw, mr))
    }
}

/// `ibv_alloc_mw`.
#[derive(Debug)]
pub(crate) struct Mw {
    pd: Arc<Pd>,
    mw: NonNull<ibv_mw>,
    pub handle: u32,
    /// Its rkey: the provider's after a type 1 bind, the bind's after a type 2 one.
    rkey: AtomicU32,
}

// SAFETY: windows are the provider's; verbs on them are thread-safe.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

impl Mw {
    pub fn alloc(pd: &Arc<Pd>, t: MwType) -> Result<Arc<Mw>> {
        // SAFETY: the device is open while the PD is; the op table is not written after.
        let alloc = unsafe { (*pd.dev.ctx()).ops.alloc_mw }
            .ok_or(Error::Unsupported("memory windows on this provider"))?;
        // SAFETY: a live PD.
        let mw = unsafe { alloc(pd.ptr(), t as u32) };
        let mw = NonNull::new(mw).ok_or_else(|| super::verbs::last_error("ibv_alloc_mw"))?;
        // SAFETY: the window the provider just made.
        let (handle, rkey) = unsafe { (mw.as_ref().handle, mw.as_ref().rkey) };
        let made = Arc::new(Mw {
            pd: pd.clone(),
            mw,
            handle,
            rkey: AtomicU32::new(rkey),
        });
        lock(&pd.keys).mws.insert(handle, Arc::downgrade(&made));
        Ok(made)
    }

    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }

    /// The C form of a BIND_MW work request's window part, the keys' lock held until the
    /// post (so neither object goes meanwhile); after a successful post call `bound`.
    pub fn for_wr<'a>(
        pd: &'a Pd,
        bind: &MwBind,
    ) -> Result<(ibv_send_wr_bind_mw, Arc<Mw>, MutexGuard<'a, Keys>)> {
        let keys = lock(&pd.keys);
        let (mw, mr) = keys.find(bind)?;
        let c = ibv_send_wr_bind_mw {
            mw: mw.mw.as_ptr(),
            rkey: bind.rkey,
            bind_info: info(mr, bind),
        };
        Ok((c, mw, keys))
    }

    /// A type 2 bind was posted: the window answers to its rkey from now on.
    pub fn bound(&self, rkey: u32) {
        self.rkey.store(rkey, Ordering::Relaxed);
    }
}

/// `ibv_bind_mw` of a type 1 window on `qp` (an inline call through the op table).
pub(crate) fn bind_type1(
    pd: &Pd,
    qp: *mut ibv_qp,
    wr_id: u64,
    signaled: bool,
    bind: &MwBind,
) -> Result<()> {
    // SAFETY: the device is open while the PD is; the op table is not written after.
    let op = unsafe { (*pd.dev.ctx()).ops.bind_mw }
        .ok_or(Error::Unsupported("memory windows on this provider"))?;
    let keys = lock(&pd.keys);
    let (mw, mr) = keys.find(bind)?;
    let mut c = ibv_mw_bind {
        wr_id,
        send_flags: if signaled { SendFlags::SIGNALED.0 } else { 0 },
        bind_info: info(mr, bind),
    };
    // SAFETY: a live QP, window and region (the lock keeps their entries, which go
    // before they do), and a readable bind.
    check("ibv_bind_mw", unsafe { op(qp, mw.mw.as_ptr(), &mut c) })?;
    // SAFETY: as above; the provider wrote the new rkey into the window.
    mw.bound(unsafe { mw.mw.as_ref().rkey });
    Ok(())
}

fn info(mr: *mut ibv_mr, bind: &MwBind) -> ibv_mw_bind_info {
    ibv_mw_bind_info {
        mr,
        addr: bind.addr,
        length: bind.length,
        mw_access_flags: bind.access.bits(),
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        lock(&self.pd.keys).mws.remove(&self.handle);
        // SAFETY: as in `alloc`.
        if let Some(dealloc) = unsafe { (*self.pd.dev.ctx()).ops.dealloc_mw } {
            // SAFETY: allocated by `alloc`, freed once; its table entry is gone.
            unsafe { dealloc(self.mw.as_ptr()) };
        }
    }
}
