//! Protection domains and the memory regions registered in them.

use crate::context::Context;
use crate::error::Result;
use oxrdma_core::{Access, Sge, SharedBuffer};
use std::sync::Arc;

/// A protection domain: memory regions and QPs in it may be used together.
#[derive(Debug)]
pub struct ProtectionDomain {
    pub(crate) ctx: Context,
    pub(crate) pd: u32,
}

impl ProtectionDomain {
    /// Allocates `len` zeroed bytes and registers them with `access`. The region owns its
    /// memory; read and write it through the region.
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        // Refused before allocating, so the error names the limit, not the allocator.
        if len as u64 > self.ctx.attr().max_mr_size {
            return Err(oxrdma_core::VerbsError::InvalidArgument(
                "memory region larger than max_mr_size",
            )
            .into());
        }
        let buf = Arc::new(SharedBuffer::new(len)?);
        let mr = self
            .ctx
            .shared()
            .lock()
            .engine
            .reg_mr(self.pd, buf.clone(), None, access)?;
        Ok(MemoryRegion {
            ctx: self.ctx.clone(),
            buf,
            lkey: mr.lkey,
            rkey: mr.rkey,
            addr: mr.iova,
        })
    }

    /// A memory window (`ibv_alloc_mw`), unbound until a bind: type 1 with
    /// [`crate::QueuePair::bind_mw`], type 2 with a BIND_MW work request.
    pub fn alloc_mw(&self, mw_type: oxrdma_core::MwType) -> Result<MemoryWindow> {
        let (handle, _) = self.ctx.shared().lock().engine.alloc_mw(self.pd, mw_type)?;
        Ok(MemoryWindow {
            ctx: self.ctx.clone(),
            handle,
        })
    }

    /// An address handle: where UD sends go (`ibv_create_ah`).
    pub fn create_ah(&self, dgid: oxrdma_core::Gid) -> Result<AddressHandle> {
        let av = oxrdma_core::AddressVector { dgid };
        let ah = self.ctx.shared().lock().engine.create_ah(self.pd, av)?;
        Ok(AddressHandle {
            ctx: self.ctx.clone(),
            ah,
        })
    }

    /// A shared receive queue (`ibv_create_srq`); `srq_limit` 0 leaves the limit unarmed.
    pub fn create_srq(
        &self,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
    ) -> Result<SharedReceiveQueue> {
        let srq = self
            .ctx
            .shared()
            .lock()
            .engine
            .create_srq(self.pd, max_wr, max_sge, srq_limit)?;
        Ok(SharedReceiveQueue {
            ctx: self.ctx.clone(),
            srq,
        })
    }

    /// Creates a queue pair in this PD (in RESET; see [`crate::QueuePair::connect`]).
    pub fn create_qp(
        &self,
        send_cq: &crate::CompletionQueue,
        recv_cq: &crate::CompletionQueue,
        qp_type: oxrdma_core::QpType,
        cap: oxrdma_core::QpCap,
    ) -> Result<crate::QueuePair> {
        self.create_qp_on_srq(send_cq, recv_cq, qp_type, cap, None)
    }

    /// [`Self::create_qp`], taking its receives from `srq` when given (RC and UD).
    pub fn create_qp_on_srq(
        &self,
        send_cq: &crate::CompletionQueue,
        recv_cq: &crate::CompletionQueue,
        qp_type: oxrdma_core::QpType,
        cap: oxrdma_core::QpCap,
        srq: Option<&SharedReceiveQueue>,
    ) -> Result<crate::QueuePair> {
        let init = oxrdma_core::QpInitAttr {
            qp_type,
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            cap,
            sq_sig_all: false,
            srq: srq.map(|s| s.srq),
        };
        let mut dev = self.ctx.shared().lock();
        let qpn = dev.engine.create_qp(self.pd, &init)?;
        let post = dev.engine.qp_post(qpn)?;
        drop(dev);
        Ok(crate::QueuePair {
            ctx: self.ctx.clone(),
            qpn,
            qp_type,
            post,
        })
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // Busy while MRs or QPs remain: like ibv_dealloc_pd, that is the caller's ordering.
        let _ = self.ctx.shared().lock().engine.dealloc_pd(self.pd);
    }
}

/// Registered memory. Remote peers reach it through `addr` and `rkey`; local work
/// requests through SGEs made by [`MemoryRegion::sge`].
///
/// The bytes are shared with the NIC: an RDMA operation may change them at any time while
/// one targeting them is in flight, exactly as with hardware. `read` and `write` copy with
/// relaxed atomic loads and stores, so a copy that races with a transfer sees some old and
/// some new bytes but is never undefined behaviour; [`MemoryRegion::as_slice`] lends the
/// bytes without a copy to a caller that promises no transfer writes them meanwhile.
#[derive(Debug)]
pub struct MemoryRegion {
    ctx: Context,
    buf: Arc<SharedBuffer>,
    lkey: u32,
    rkey: u32,
    /// The address of the first byte as peers name it.
    addr: u64,
}

impl MemoryRegion {
    /// The local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The remote key peers name in RDMA WRITE, READ and atomics.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// The address of the first byte as peers name it (`remote_addr`).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// An SGE for `len` bytes at offset `off`.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr + off as u64,
            length: len as u32,
            lkey: self.lkey,
        }
    }
    /// Copies `data` in at `off`; false if it does not fit.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        self.buf.write(off, data)
    }
    /// Copies bytes out from `off`; false if the range does not fit.
    pub fn read(&self, off: usize, out: &mut [u8]) -> bool {
        self.buf.read(off, out)
    }
    /// The bytes at `off..off + len` without a copy (None if out of range).
    ///
    /// # Safety
    /// While the slice lives, nothing may write those bytes: no receive, incoming RDMA
    /// WRITE or atomic, or READ response into them may be in progress (the completions say
    /// when they are done), and no other thread may `write` them.
    pub unsafe fn as_slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        // SAFETY: the caller's promise is the one `SharedBuffer::slice` asks for.
        unsafe { self.buf.slice(off, len) }
    }
    /// The 8 bytes at `off` as an atomic (for memory that peers target with atomics).
    pub fn atomic_u64(&self, off: usize) -> Option<&std::sync::atomic::AtomicU64> {
        self.buf.atomic_u64(off)
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().engine.dereg_mr(self.lkey);
    }
}

/// A destination for UD sends; name it in [`oxrdma_core::UdDest`] via [`AddressHandle::id`].
#[derive(Debug)]
pub struct AddressHandle {
    ctx: Context,
    ah: u32,
}

impl AddressHandle {
    pub fn id(&self) -> u32 {
        self.ah
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().engine.destroy_ah(self.ah);
    }
}

/// A pool of receive WQEs shared by QPs (`ibv_srq`).
#[derive(Debug)]
pub struct SharedReceiveQueue {
    ctx: Context,
    srq: u32,
}

impl SharedReceiveQueue {
    /// `ibv_post_srq_recv` of one WR.
    pub fn post_recv(&self, wr: oxrdma_core::RecvWr) -> Result<()> {
        self.ctx
            .shared()
            .lock()
            .engine
            .post_srq_recv(self.srq, wr)?;
        Ok(())
    }
    /// Arms the limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT); it fires once, as an
    /// [`oxrdma_core::AsyncEvent::Srq`] from [`Context::poll_event`], then disarms.
    pub fn arm(&self, limit: u32) -> Result<()> {
        self.ctx.shared().lock().engine.arm_srq(self.srq, limit)?;
        Ok(())
    }
    pub fn query(&self) -> Result<oxrdma_core::SrqAttr> {
        Ok(self.ctx.shared().lock().engine.query_srq(self.srq)?)
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().engine.destroy_srq(self.srq);
    }
}

/// A memory window: remote access to part of a region, under its own rkey.
#[derive(Debug)]
pub struct MemoryWindow {
    ctx: Context,
    handle: u32,
}

impl MemoryWindow {
    /// What [`oxrdma_core::MwBind::mw`] names.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The current rkey (it changes with every bind).
    pub fn rkey(&self) -> u32 {
        self.ctx
            .shared()
            .lock()
            .engine
            .mw_rkey(self.handle)
            .unwrap_or_default()
    }
    /// The rkey the next bind should give: same window index, next key byte
    /// (`ibv_inc_rkey`).
    pub fn next_rkey(&self) -> u32 {
        let k = self.rkey();
        (k & !0xff) | (k.wrapping_add(1) & 0xff)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().engine.dealloc_mw(self.handle);
    }
}

impl MemoryRegion {
    /// A binding of `mw` to `[off, off+len)` of this region with remote rights `access`
    /// and the window's next rkey (for `QueuePair::bind_mw` or a BIND_MW work request).
    pub fn window(
        &self,
        mw: &MemoryWindow,
        off: usize,
        len: usize,
        access: Access,
    ) -> oxrdma_core::MwBind {
        oxrdma_core::MwBind {
            mw: mw.handle,
            rkey: mw.next_rkey(),
            lkey: self.lkey,
            addr: self.addr + off as u64,
            length: len as u64,
            access,
        }
    }
}
