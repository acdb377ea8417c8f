//! Address handles (of an engine or an rdma-core device), and the engine's shared
//! receive queues and memory windows.

use crate::engine_context::EngineContext;
use crate::error::Result;
use crate::rdma_core::{self, RdmaCoreContext};
use crate::MemoryRegion;
use oxrdma_core::Access;
use std::sync::Arc;

/// A destination for UD sends; name it in [`oxrdma_core::UdDest`] via [`AddressHandle::id`].
///
/// ```
/// use oxrdma::{Access, Context, QpCap, QpType, RecvWr, SendWr};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.12".parse().unwrap())?,
///               Context::open("127.0.1.13".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let mb = pb.register(4096, Access::LOCAL_WRITE)?;
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let qa = pa.create_qp(&ca, &ca, QpType::Ud, QpCap::default())?;
/// let qb = pb.create_qp(&cb, &cb, QpType::Ud, QpCap::default())?;
/// qa.ready_ud(0x1111)?;
/// qb.ready_ud(0x1111)?;
/// // A UD receive buffer begins with the 40 bytes of the GRH.
/// qb.post_recv(RecvWr { wr_id: 1, sges: vec![mb.sge(0, 40 + 1024)?].into() })?;
/// // No connection: each datagram names b's GID (an AH), its QP and its Q_Key.
/// let to_b = pa.create_ah(b.gid())?;
/// qa.post_send(SendWr::send_inline(2, b"a datagram").to(to_b.dest(qb.qpn(), 0x1111)))?;
/// ca.wait_one(Duration::from_secs(10))?.result()?;
/// let got = cb.wait_one(Duration::from_secs(10))?.result()?;
/// assert_eq!((got.byte_len, got.src_qp, got.src_gid), (40 + 10, qa.qpn(), Some(a.gid())));
/// let mut text = [0u8; 10];
/// mb.read(40, &mut text)?;
/// assert_eq!(&text, b"a datagram");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AddressHandle {
    ah: u32,
    owner: AhOwner,
}

/// Who destroys it.
#[derive(Debug)]
enum AhOwner {
    Engine(EngineAh),
    RdmaCore(AhEntry),
}

/// An rdma-core address handle's place in its device's table: the handle is destroyed
/// when this goes (and a UD WR posted with it has been handed to the provider).
#[derive(Debug)]
struct AhEntry {
    ctx: Arc<RdmaCoreContext>,
    id: u32,
}

impl Drop for AhEntry {
    fn drop(&mut self) {
        rdma_core::Ahs::remove(&self.ctx.ahs, self.id);
    }
}

/// An address handle of an engine device.
#[derive(Debug)]
struct EngineAh {
    ctx: EngineContext,
    ah: u32,
    live: bool,
}

impl AddressHandle {
    pub(crate) fn engine(ctx: &EngineContext, ah: u32) -> AddressHandle {
        AddressHandle {
            ah,
            owner: AhOwner::Engine(EngineAh {
                ctx: ctx.clone(),
                ah,
                live: true,
            }),
        }
    }

    pub(crate) fn rdma_core(
        ctx: &Arc<RdmaCoreContext>,
        pd: &Arc<rdma_core::Pd>,
        av: oxrdma_core::AddressVector,
    ) -> Result<AddressHandle> {
        let made = Arc::new(rdma_core::Ah::create(pd, av)?);
        let id = rdma_core::Ahs::add(&ctx.ahs, made);
        Ok(AddressHandle {
            ah: id,
            owner: AhOwner::RdmaCore(AhEntry {
                ctx: ctx.clone(),
                id,
            }),
        })
    }

    /// `ibv_destroy_ah`.
    pub fn try_destroy(self) -> std::result::Result<(), (Self, crate::Error)> {
        let AddressHandle { ah, owner } = self;
        match owner {
            AhOwner::Engine(e) => e.try_destroy().map_err(|(e, err)| {
                let back = AddressHandle {
                    ah,
                    owner: AhOwner::Engine(e),
                };
                (back, err)
            }),
            AhOwner::RdmaCore(entry) => {
                drop(entry);
                Ok(())
            }
        }
    }

    /// Its number, as a UD send names it.
    pub fn id(&self) -> u32 {
        self.ah
    }

    /// A UD send's destination through it: QP `qpn` there, with Q_Key `qkey`
    /// ([`oxrdma_core::SendWr::to`]).
    pub fn dest(&self, qpn: u32, qkey: u32) -> oxrdma_core::UdDest {
        oxrdma_core::UdDest {
            ah: self.ah,
            remote_qpn: qpn,
            remote_qkey: qkey,
        }
    }
}

/// A pool of receive WQEs shared by QPs (`ibv_srq`).
///
/// ```
/// use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, RecvWr, SendWr};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.14".parse().unwrap())?,
///               Context::open("127.0.1.15".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let mb = pb.register(4096, Access::LOCAL_WRITE)?;
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let srq = pb.create_srq(16, 1, 0)?;
/// let mut pairs = Vec::new();
/// for _ in 0..2 {
///     let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
///     let qb = pb.create_qp_on_srq(&cb, &cb, QpType::Rc, QpCap::default(), Some(&srq))?;
///     qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
///     qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
///     pairs.push((qa, qb));
/// }
/// // Receives go to the SRQ: a message to either of b's QPs takes the next one.
/// for i in 0..2 {
///     srq.post_recv(RecvWr { wr_id: i, sges: vec![mb.sge(64 * i as usize, 64)?].into() })?;
/// }
/// for (i, (qa, qb)) in pairs.iter().enumerate() {
///     qa.post_send(SendWr::send_inline(9, b"through the SRQ"))?;
///     let got = cb.wait_one(Duration::from_secs(10))?.result()?;
///     assert_eq!((got.wr_id, got.qp_num, got.byte_len), (i as u64, qb.qpn(), 15));
/// }
/// let mut text = [0u8; 15];
/// mb.read(64, &mut text)?;
/// assert_eq!(&text, b"through the SRQ");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SharedReceiveQueue {
    kind: SrqKind,
}

#[derive(Debug)]
enum SrqKind {
    Engine(EngineSrq),
    RdmaCore(Arc<rdma_core::Srq>),
}

/// A shared receive queue of an engine device.
#[derive(Debug)]
struct EngineSrq {
    ctx: EngineContext,
    srq: u32,
    live: bool,
}

impl SharedReceiveQueue {
    pub(crate) fn new(ctx: &EngineContext, srq: u32) -> SharedReceiveQueue {
        SharedReceiveQueue {
            kind: SrqKind::Engine(EngineSrq {
                ctx: ctx.clone(),
                srq,
                live: true,
            }),
        }
    }

    pub(crate) fn rdma_core(srq: rdma_core::Srq) -> SharedReceiveQueue {
        SharedReceiveQueue {
            kind: SrqKind::RdmaCore(Arc::new(srq)),
        }
    }

    pub(crate) fn rdma_core_srq(&self) -> Option<&Arc<rdma_core::Srq>> {
        match &self.kind {
            SrqKind::Engine(_) => None,
            SrqKind::RdmaCore(s) => Some(s),
        }
    }

    pub(crate) fn engine_id(&self) -> Option<u32> {
        match &self.kind {
            SrqKind::Engine(s) => Some(s.srq),
            SrqKind::RdmaCore(_) => None,
        }
    }

    /// The number its asynchronous events carry ([`oxrdma_core::AsyncEvent::Srq`]).
    pub fn id(&self) -> u32 {
        match &self.kind {
            SrqKind::Engine(s) => s.srq,
            SrqKind::RdmaCore(s) => s.handle,
        }
    }

    /// `ibv_post_srq_recv` of one WR.
    pub fn post_recv(&self, wr: oxrdma_core::RecvWr) -> Result<()> {
        match &self.kind {
            SrqKind::Engine(s) => {
                s.ctx.shared().lock().engine.post_srq_recv(s.srq, wr)?;
                Ok(())
            }
            SrqKind::RdmaCore(s) => s.post_recv(&wr),
        }
    }

    /// Arms the limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT); it fires once, as an
    /// [`oxrdma_core::AsyncEvent::Srq`] from [`crate::Context::poll_event`], then disarms.
    pub fn arm(&self, limit: u32) -> Result<()> {
        match &self.kind {
            SrqKind::Engine(s) => {
                s.ctx.shared().lock().engine.arm_srq(s.srq, limit)?;
                Ok(())
            }
            SrqKind::RdmaCore(s) => s.arm(limit),
        }
    }

    /// `ibv_query_srq`: its depth and limit (and on an engine device, what is posted).
    pub fn query(&self) -> Result<oxrdma_core::SrqAttr> {
        match &self.kind {
            SrqKind::Engine(s) => Ok(s.ctx.shared().lock().engine.query_srq(s.srq)?),
            SrqKind::RdmaCore(s) => s.query(),
        }
    }

    /// `ibv_destroy_srq`: busy while a QP uses it; the SRQ comes back with the error.
    pub fn try_destroy(self) -> std::result::Result<(), (Self, crate::Error)> {
        match self.kind {
            SrqKind::Engine(s) => s.try_destroy().map_err(|(s, e)| {
                let back = SharedReceiveQueue {
                    kind: SrqKind::Engine(s),
                };
                (back, e)
            }),
            SrqKind::RdmaCore(s) => Arc::try_unwrap(s).map(drop).map_err(|s| {
                let back = SharedReceiveQueue {
                    kind: SrqKind::RdmaCore(s),
                };
                (back, oxrdma_core::VerbsError::Busy("SRQ in use").into())
            }),
        }
    }
}

/// A memory window: remote access to part of a region, under its own rkey.
///
/// ```
/// use oxrdma::{Access, ConnectOptions, Context, MwType, QpCap, QpType, RemoteBuf, SendWr};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.16".parse().unwrap())?,
///               Context::open("127.0.1.17".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let ma = pa.register(64, Access::LOCAL_WRITE)?;
/// // b's region grants peers nothing itself, only the right to bind windows to it.
/// let mb = pb.register(4096, Access::LOCAL_WRITE | Access::MW_BIND)?;
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
/// let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
/// qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
/// qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
/// // A type 1 window on bytes 1024..2048 that peers may WRITE, under the window's rkey.
/// let mw = pb.alloc_mw(MwType::Type1)?;
/// qb.bind_mw(1, true, mb.window(&mw, 1024, 1024, Access::REMOTE_WRITE))?;
/// cb.wait_one(Duration::from_secs(10))?.result()?;
/// let window = RemoteBuf::new(mb.addr() + 1024, mw.rkey(), 1024).unwrap();
/// ma.write(0, b"through the window")?;
/// qa.post_send(SendWr::write(2, [ma.sge(0, 18)?], window)?)?;
/// ca.wait_one(Duration::from_secs(10))?.result()?;
/// let mut got = [0u8; 18];
/// mb.read(1024, &mut got)?;
/// assert_eq!(&got, b"through the window");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryWindow {
    kind: MwKind,
}

#[derive(Debug)]
enum MwKind {
    Engine(EngineMw),
    RdmaCore(Arc<rdma_core::Mw>),
}

/// A memory window of an engine device.
#[derive(Debug)]
struct EngineMw {
    ctx: EngineContext,
    handle: u32,
    live: bool,
}

impl MemoryWindow {
    pub(crate) fn new(ctx: &EngineContext, handle: u32) -> MemoryWindow {
        MemoryWindow {
            kind: MwKind::Engine(EngineMw {
                ctx: ctx.clone(),
                handle,
                live: true,
            }),
        }
    }

    pub(crate) fn rdma_core(mw: Arc<rdma_core::Mw>) -> MemoryWindow {
        MemoryWindow {
            kind: MwKind::RdmaCore(mw),
        }
    }

    /// Its number, as binds name it.
    pub fn handle(&self) -> u32 {
        match &self.kind {
            MwKind::Engine(m) => m.handle,
            MwKind::RdmaCore(m) => m.handle,
        }
    }

    /// The current rkey (it changes with every bind).
    pub fn rkey(&self) -> u32 {
        match &self.kind {
            MwKind::Engine(m) => m
                .ctx
                .shared()
                .lock()
                .engine
                .mw_rkey(m.handle)
                .unwrap_or_default(),
            MwKind::RdmaCore(m) => m.rkey(),
        }
    }

    /// The rkey the next bind should give: same window index, next key byte
    /// (`ibv_inc_rkey`).
    pub fn next_rkey(&self) -> u32 {
        let k = self.rkey();
        (k & !0xff) | (k.wrapping_add(1) & 0xff)
    }

    /// `ibv_dealloc_mw`; the window comes back with the error if refused.
    pub fn try_destroy(self) -> std::result::Result<(), (Self, crate::Error)> {
        match self.kind {
            MwKind::Engine(m) => m.try_destroy().map_err(|(m, e)| {
                let back = MemoryWindow {
                    kind: MwKind::Engine(m),
                };
                (back, e)
            }),
            MwKind::RdmaCore(m) => {
                drop(m);
                Ok(())
            }
        }
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
            mw: mw.handle(),
            rkey: mw.next_rkey(),
            lkey: self.lkey,
            addr: self.addr + off as u64,
            length: len as u64,
            access,
        }
    }
}

crate::destroy::destroy_with! {
    /// `ibv_destroy_ah`.
    EngineAh.ah => destroy_ah;
    /// `ibv_destroy_srq`: busy while a QP uses it.
    EngineSrq.srq => destroy_srq, events Srq;
    /// `ibv_dealloc_mw`.
    EngineMw.handle => dealloc_mw;
}
