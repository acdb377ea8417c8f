//! Protection domains: the public one (of an engine or an rdma-core device) and the
//! engine's.

use crate::cq::EngineCq;
use crate::engine_context::EngineContext;
use crate::error::{Error, Result};
use crate::events::Source;
use crate::objects::{AddressHandle, MemoryWindow, SharedReceiveQueue};
use crate::qp::EngineQp;
use crate::rdma_core::{self, RdmaCoreContext};
use crate::MemoryRegion;
use oxrdma_core::{Access, SharedBuffer, VerbsError};
use std::sync::Arc;

/// An SRQ of one kind of device given for a QP of the other.
const OTHER_SRQ: VerbsError = VerbsError::InvalidArgument("an SRQ of another kind of device");

/// A protection domain: memory regions and QPs in it may be used together.
///
/// ```
/// use oxrdma::{Access, Context, Error, QpCap, QpType, VerbsError};
/// # fn main() -> oxrdma::Result<()> {
/// let ctx = Context::open("127.0.1.9".parse().unwrap())?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(8)?;
/// // A QP's work requests may use the memory of its own PD only.
/// let mr = pd.register(4096, Access::LOCAL_WRITE)?;
/// let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
/// // While they exist the PD cannot go (EBUSY): it comes back, still usable.
/// let (pd, err) = pd.try_destroy().unwrap_err();
/// assert!(matches!(err, Error::Verbs(VerbsError::Busy(_))), "{err}");
/// let more = pd.register(64, Access::LOCAL_WRITE)?;
/// drop((qp, mr, more));
/// pd.try_destroy().map_err(|(_, e)| e)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ProtectionDomain {
    kind: PdKind,
}

#[derive(Debug)]
enum PdKind {
    Engine(EnginePd),
    RdmaCore {
        ctx: Arc<RdmaCoreContext>,
        pd: Arc<rdma_core::Pd>,
    },
}

impl From<EnginePd> for ProtectionDomain {
    fn from(pd: EnginePd) -> ProtectionDomain {
        ProtectionDomain {
            kind: PdKind::Engine(pd),
        }
    }
}

impl ProtectionDomain {
    pub(crate) fn rdma_core(ctx: &Arc<RdmaCoreContext>) -> Result<ProtectionDomain> {
        Ok(ProtectionDomain {
            kind: PdKind::RdmaCore {
                ctx: ctx.clone(),
                pd: Arc::new(rdma_core::Pd::alloc(&ctx.dev)?),
            },
        })
    }

    /// Allocates `len` zeroed bytes and registers them with `access`. The region owns its
    /// memory; read and write it through the region.
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        let max = match &self.kind {
            PdKind::Engine(pd) => pd.ctx.attr().max_mr_size,
            PdKind::RdmaCore { ctx, .. } => ctx.dev.attr.max_mr_size,
        };
        // Refused before allocating, so the error names the limit, not the allocator.
        if len as u64 > max {
            return Err(
                VerbsError::InvalidArgument("memory region larger than max_mr_size").into(),
            );
        }
        let buf = Arc::new(SharedBuffer::new(len)?);
        self.register_buffer(buf, None, access)
    }

    /// Registers `len` bytes of the caller's memory at `ptr` (`ibv_reg_mr`): the engine
    /// reads and writes them in place. Peers name the first byte `iova` (on an rdma-core
    /// device, `iova` must be `ptr`'s address).
    ///
    /// # Safety
    /// The bytes must stay allocated and valid for reads and writes until the region is
    /// destroyed, and every access to them by the caller while a transfer may touch them
    /// is the caller's race to avoid (as with a hardware NIC).
    pub unsafe fn register_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion> {
        // SAFETY: the caller's promise is the one `from_raw` asks for.
        let buf = unsafe { SharedBuffer::from_raw(ptr, len) }.ok_or(
            VerbsError::InvalidArgument("NULL address for a memory region"),
        )?;
        self.register_buffer(Arc::new(buf), Some(iova), access)
    }

    fn register_buffer(
        &self,
        buf: Arc<SharedBuffer>,
        iova: Option<u64>,
        access: Access,
    ) -> Result<MemoryRegion> {
        match &self.kind {
            PdKind::Engine(pd) => pd.register_buffer(buf, iova, access),
            PdKind::RdmaCore { pd, .. } => {
                if iova.is_some_and(|a| a != buf.addr()) {
                    return Err(Error::Unsupported("an iova other than the address"));
                }
                MemoryRegion::rdma_core(pd, buf, access)
            }
        }
    }

    /// A memory window (`ibv_alloc_mw`), unbound until a bind: type 1 with
    /// [`crate::QueuePair::bind_mw`], type 2 with a BIND_MW work request.
    pub fn alloc_mw(&self, mw_type: oxrdma_core::MwType) -> Result<MemoryWindow> {
        match &self.kind {
            PdKind::Engine(pd) => pd.alloc_mw(mw_type),
            PdKind::RdmaCore { pd, .. } => {
                Ok(MemoryWindow::rdma_core(rdma_core::Mw::alloc(pd, mw_type)?))
            }
        }
    }

    /// An address handle: where UD sends go (`ibv_create_ah`), from the device GID
    /// [`crate::Context::gid_index_for`] picks.
    pub fn create_ah(&self, dgid: oxrdma_core::Gid) -> Result<AddressHandle> {
        let sgid_index = match &self.kind {
            PdKind::Engine(pd) => pd.ctx.gid_index_for(dgid),
            PdKind::RdmaCore { ctx, .. } => ctx.dev.gid_index_for(dgid),
        };
        self.create_ah_av(oxrdma_core::AddressVector { dgid, sgid_index })
    }

    /// An address handle to `av.dgid` whose packets leave from the device's GID
    /// `av.sgid_index` (refused if its table has none there, or of the other IP family).
    pub fn create_ah_av(&self, av: oxrdma_core::AddressVector) -> Result<AddressHandle> {
        match &self.kind {
            PdKind::Engine(pd) => pd.create_ah_av(av),
            PdKind::RdmaCore { ctx, pd } => AddressHandle::rdma_core(ctx, pd, av),
        }
    }

    /// A shared receive queue (`ibv_create_srq`); `srq_limit` 0 leaves the limit unarmed.
    pub fn create_srq(
        &self,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
    ) -> Result<SharedReceiveQueue> {
        match &self.kind {
            PdKind::Engine(pd) => pd.create_srq(max_wr, max_sge, srq_limit),
            PdKind::RdmaCore { pd, .. } => Ok(SharedReceiveQueue::rdma_core(
                rdma_core::Srq::create(pd, max_wr, max_sge, srq_limit)?,
            )),
        }
    }

    /// Creates a queue pair in this PD (in RESET; see [`crate::QueuePair::connect`]).
    pub fn create_qp(
        &self,
        send_cq: &crate::CompletionQueue,
        recv_cq: &crate::CompletionQueue,
        qp_type: oxrdma_core::QpType,
        cap: oxrdma_core::QpCap,
    ) -> Result<crate::QueuePair> {
        self.create_qp_with(send_cq, recv_cq, QpInit::new(qp_type, cap))
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
        let init = QpInit {
            srq,
            ..QpInit::new(qp_type, cap)
        };
        self.create_qp_with(send_cq, recv_cq, init)
    }

    /// [`Self::create_qp`] with every option of `ibv_qp_init_attr`. The CQs must be of
    /// this PD's device.
    pub fn create_qp_with(
        &self,
        send_cq: &crate::CompletionQueue,
        recv_cq: &crate::CompletionQueue,
        init: QpInit<'_>,
    ) -> Result<crate::QueuePair> {
        let other = || VerbsError::InvalidArgument("a CQ of another kind of device");
        match &self.kind {
            PdKind::Engine(pd) => {
                let (Some(s), Some(r)) = (send_cq.engine_cq(), recv_cq.engine_cq()) else {
                    return Err(other().into());
                };
                Ok(pd.create_qp_with(s, r, init)?.into())
            }
            PdKind::RdmaCore { ctx, pd } => {
                let (Some(s), Some(r)) = (send_cq.rdma_core_cq(), recv_cq.rdma_core_cq()) else {
                    return Err(other().into());
                };
                let srq = match init.srq {
                    None => None,
                    Some(srq) => Some(srq.rdma_core_srq().ok_or(OTHER_SRQ)?),
                };
                crate::QueuePair::rdma_core(ctx, pd, s, r, srq, init)
            }
        }
    }

    /// `ibv_dealloc_pd`: refused (EBUSY) while regions, QPs or address handles of it
    /// exist; the PD comes back with the error.
    pub fn try_destroy(self) -> std::result::Result<(), (Self, Error)> {
        match self.kind {
            PdKind::Engine(pd) => pd.try_destroy().map_err(|(pd, e)| (pd.into(), e)),
            PdKind::RdmaCore { ctx, pd } => match Arc::try_unwrap(pd) {
                // Deallocated as it drops.
                Ok(_) => Ok(()),
                Err(pd) => Err((
                    ProtectionDomain {
                        kind: PdKind::RdmaCore { ctx, pd },
                    },
                    VerbsError::Busy("protection domain in use").into(),
                )),
            },
        }
    }
}

/// A PD of an engine device.
#[derive(Debug)]
pub(crate) struct EnginePd {
    pub(crate) ctx: EngineContext,
    pub(crate) pd: u32,
    pub(crate) live: bool,
}

impl EnginePd {
    /// A PD of `ctx`'s device.
    pub(crate) fn alloc(ctx: &EngineContext) -> Result<EnginePd> {
        let pd = ctx.shared().lock().engine.alloc_pd()?;
        Ok(EnginePd {
            ctx: ctx.clone(),
            pd,
            live: true,
        })
    }

    fn register_buffer(
        &self,
        buf: Arc<SharedBuffer>,
        iova: Option<u64>,
        access: Access,
    ) -> Result<MemoryRegion> {
        let mr = self
            .ctx
            .shared()
            .lock()
            .engine
            .reg_mr(self.pd, buf.clone(), iova, access)?;
        Ok(MemoryRegion::engine(&self.ctx, buf, &mr))
    }

    fn alloc_mw(&self, mw_type: oxrdma_core::MwType) -> Result<MemoryWindow> {
        let (handle, _) = self.ctx.shared().lock().engine.alloc_mw(self.pd, mw_type)?;
        Ok(MemoryWindow::new(&self.ctx, handle))
    }

    fn create_ah_av(&self, av: oxrdma_core::AddressVector) -> Result<AddressHandle> {
        let ah = self.ctx.shared().lock().engine.create_ah(self.pd, av)?;
        Ok(AddressHandle::engine(&self.ctx, ah))
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32, srq_limit: u32) -> Result<SharedReceiveQueue> {
        let srq = self
            .ctx
            .shared()
            .lock()
            .engine
            .create_srq(self.pd, max_wr, max_sge, srq_limit)?;
        self.ctx.claim(Source::Srq(srq));
        Ok(SharedReceiveQueue::new(&self.ctx, srq))
    }

    fn create_qp_with(
        &self,
        send_cq: &EngineCq,
        recv_cq: &EngineCq,
        init: QpInit<'_>,
    ) -> Result<EngineQp> {
        let attr = oxrdma_core::QpInitAttr {
            qp_type: init.qp_type,
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            srq: init
                .srq
                .map(|s| {
                    s.engine_id().ok_or(VerbsError::InvalidArgument(
                        "an SRQ of another kind of device",
                    ))
                })
                .transpose()?,
        };
        let mut dev = self.ctx.shared().lock();
        let qpn = dev.create_qp(self.pd, &attr)?;
        let post = dev.engine.qp_post(qpn)?;
        self.ctx.claim(Source::Qp(qpn));
        drop(dev);
        Ok(EngineQp {
            ctx: self.ctx.clone(),
            qpn,
            qp_type: init.qp_type,
            post,
            psn: std::sync::atomic::AtomicU32::new(self.ctx.random_psn()),
        })
    }
}

crate::destroy::destroy_with! {
    /// `ibv_dealloc_pd`: busy while it holds objects.
    EnginePd.pd => dealloc_pd;
}

/// How to make a queue pair (`struct ibv_qp_init_attr` without the CQs).
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC, UC or UD.
    pub qp_type: oxrdma_core::QpType,
    /// Its queues' depths, SGEs and inline room.
    pub cap: oxrdma_core::QpCap,
    /// Take receives from this shared receive queue (RC, UD).
    pub srq: Option<&'a SharedReceiveQueue>,
    /// Every send WR completes, whatever its SIGNALED flag says.
    pub sq_sig_all: bool,
}

impl QpInit<'_> {
    /// A QP of `qp_type` with `cap`, its own receive queue, signaled sends only.
    pub fn new(qp_type: oxrdma_core::QpType, cap: oxrdma_core::QpCap) -> Self {
        QpInit {
            qp_type,
            cap,
            srq: None,
            sq_sig_all: false,
        }
    }
}
