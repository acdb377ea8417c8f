//! Protection domains, memory regions and address handles on an rdma-core device. Each
//! holds what it was made on, so a device outlives its objects as verbs require.

use super::device::Device;
use super::mw::Keys;
use super::verbs::{check, last_error, verbs};
use crate::error::Result;
use oxrdma_core::{Access, AddressVector, SharedBuffer};
use oxrdma_verbs_abi::*;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// `ibv_alloc_pd`.
#[derive(Debug)]
pub(crate) struct Pd {
    pub dev: Arc<Device>,
    pd: NonNull<ibv_pd>,
    /// Its regions and windows by the numbers binds name them with.
    pub keys: Mutex<Keys>,
}

// SAFETY: a PD is a handle the provider guards; verbs on it are thread-safe.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn alloc(dev: &Arc<Device>) -> Result<Pd> {
        let v = verbs()?;
        // SAFETY: an open context.
        let pd = unsafe { (v.ibv_alloc_pd)(dev.ctx()) };
        Ok(Pd {
            dev: dev.clone(),
            pd: NonNull::new(pd).ok_or_else(|| last_error("ibv_alloc_pd"))?,
            keys: Mutex::default(),
        })
    }

    pub fn ptr(&self) -> *mut ibv_pd {
        self.pd.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            // SAFETY: allocated by `alloc`, freed once, after its regions, QPs and AHs
            // (each holds the PD).
            unsafe { (v.ibv_dealloc_pd)(self.ptr()) };
        }
    }
}

/// `ibv_reg_mr` of bytes the region owns (or the caller lent, `register_raw`).
#[derive(Debug)]
pub(crate) struct Mr {
    pd: Arc<Pd>,
    mr: NonNull<ibv_mr>,
    /// Kept until the NIC can no longer touch it: dropped after `ibv_dereg_mr`.
    _buf: Arc<SharedBuffer>,
    pub lkey: u32,
    pub rkey: u32,
}

// SAFETY: the registration is only destroyed through `&mut`; the keys are plain values.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    pub fn register(pd: &Arc<Pd>, buf: Arc<SharedBuffer>, access: Access) -> Result<Mr> {
        let v = verbs()?;
        let flags = i32::try_from(access.bits()).map_err(|_| {
            oxrdma_core::VerbsError::InvalidArgument("access flags beyond rdma-core's")
        })?;
        // SAFETY: the buffer's `len` bytes at its address stay allocated while the
        // registration lives (it holds the buffer); a PD of an open device.
        let mr = unsafe {
            (v.ibv_reg_mr)(
                pd.ptr(),
                buf.addr() as *mut std::ffi::c_void,
                buf.len(),
                flags,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| last_error("ibv_reg_mr"))?;
        // SAFETY: a registration the library just returned.
        let (lkey, rkey) = unsafe { (mr.as_ref().lkey, mr.as_ref().rkey) };
        Keys::add_mr(&pd.keys, lkey, mr);
        Ok(Mr {
            pd: pd.clone(),
            mr,
            _buf: buf,
            lkey,
            rkey,
        })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            Keys::remove_mr(&self.pd.keys, self.lkey);
            // SAFETY: registered by `register`, deregistered once (its bind entry gone),
            // before the buffer goes.
            unsafe { (v.ibv_dereg_mr)(self.mr.as_ptr()) };
        }
    }
}

/// `ibv_create_ah`: a UD destination's path.
#[derive(Debug)]
pub(crate) struct Ah {
    _pd: Arc<Pd>,
    ah: NonNull<ibv_ah>,
}

// SAFETY: an AH is read by the provider only; destroyed through `&mut`.
unsafe impl Send for Ah {}
// SAFETY: as above.
unsafe impl Sync for Ah {}

impl Ah {
    pub fn create(pd: &Arc<Pd>, av: AddressVector) -> Result<Ah> {
        pd.dev.check_sgid(av.sgid_index)?;
        let v = verbs()?;
        let mut attr = oxrdma_verbs_abi::qp_attr::ah_attr(av);
        // SAFETY: a PD of an open device and a readable attribute.
        let ah = unsafe { (v.ibv_create_ah)(pd.ptr(), &mut attr) };
        Ok(Ah {
            _pd: pd.clone(),
            ah: NonNull::new(ah).ok_or_else(|| last_error("ibv_create_ah"))?,
        })
    }

    pub fn ptr(&self) -> *mut ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            // SAFETY: created by `create`, destroyed once; a WR naming it is the caller's
            // to have completed (as with a NIC).
            let _ = check("ibv_destroy_ah", unsafe { (v.ibv_destroy_ah)(self.ptr()) });
        }
    }
}
