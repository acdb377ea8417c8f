//! Shared receive queues on an rdma-core device.

use super::convert::{recv_wr, Sges};
use super::objects::Pd;
use super::verbs::{check, last_error, verbs};
use crate::error::{Error, Result};
use oxrdma_core::{RecvWr, SrqAttr};
use oxrdma_verbs_abi::*;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::Arc;

/// `IBV_SRQ_LIMIT` of `enum ibv_srq_attr_mask`.
const SRQ_LIMIT: c_int = 2;

/// `ibv_create_srq`.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: Arc<Pd>,
    srq: NonNull<ibv_srq>,
    /// The number its asynchronous events name.
    pub handle: u32,
}

// SAFETY: rdma-core's SRQ verbs (post, modify, query) may be called from any thread.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Srq {
    pub fn create(pd: &Arc<Pd>, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq> {
        let v = verbs()?;
        let mut init = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: limit,
            },
        };
        // SAFETY: a live PD; `init` is readable and writable (the provider writes back the
        // depths it gave).
        let srq = unsafe { (v.ibv_create_srq)(pd.ptr(), &mut init) };
        let srq = NonNull::new(srq).ok_or_else(|| last_error("ibv_create_srq"))?;
        // SAFETY: the SRQ the library just returned.
        let handle = unsafe { srq.as_ref().handle };
        Ok(Srq {
            pd: pd.clone(),
            srq,
            handle,
        })
    }

    pub fn ptr(&self) -> *mut ibv_srq {
        self.srq.as_ptr()
    }

    /// `ibv_post_srq_recv` (an inline call through the context's op table).
    pub fn post_recv(&self, w: &RecvWr) -> Result<()> {
        // SAFETY: the device is open while this SRQ holds its PD; the table is not
        // written after the context is made.
        let post = unsafe { (*self.pd.dev.ctx()).ops.post_srq_recv }
            .ok_or(Error::Unsupported("post_srq_recv"))?;
        let mut store = Sges::new();
        let mut c = recv_wr(w, &mut store);
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live SRQ; `c` and its SGEs outlive the call.
        check("ibv_post_srq_recv", unsafe {
            post(self.ptr(), &mut c, &mut bad)
        })
    }

    /// Arms the limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT).
    pub fn arm(&self, limit: u32) -> Result<()> {
        let v = verbs()?;
        let mut a = ibv_srq_attr {
            srq_limit: limit,
            ..Default::default()
        };
        // SAFETY: a live SRQ and a readable attribute.
        check("ibv_modify_srq", unsafe {
            (v.ibv_modify_srq)(self.ptr(), &mut a, SRQ_LIMIT)
        })
    }

    /// `ibv_query_srq` (what is posted is the provider's to know: 0 here).
    pub fn query(&self) -> Result<SrqAttr> {
        let v = verbs()?;
        let mut a = ibv_srq_attr::default();
        // SAFETY: a live SRQ and a writable attribute.
        check("ibv_query_srq", unsafe {
            (v.ibv_query_srq)(self.ptr(), &mut a)
        })?;
        Ok(SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
            posted: 0,
        })
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        if let Ok(v) = verbs() {
            // SAFETY: made by `create`, destroyed once, after the QPs on it (each holds it).
            unsafe { (v.ibv_destroy_srq)(self.ptr()) };
        }
    }
}
