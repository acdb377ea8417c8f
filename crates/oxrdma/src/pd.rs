//! Protection domains and the memory regions registered in them.

use crate::context::Context;
use crate::error::Result;
use crate::events::Source;
use oxrdma_core::{Access, Sge, SharedBuffer, VerbsError};
use std::sync::Arc;

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
    pub(crate) ctx: Context,
    pub(crate) pd: u32,
    pub(crate) live: bool,
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
        self.register_buffer(buf, None, access)
    }

    /// Registers `len` bytes of the caller's memory at `ptr` (`ibv_reg_mr`): the engine
    /// reads and writes them in place. Peers name the first byte `iova`.
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
            oxrdma_core::VerbsError::InvalidArgument("NULL address for a memory region"),
        )?;
        self.register_buffer(Arc::new(buf), Some(iova), access)
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
        Ok(MemoryRegion {
            ctx: self.ctx.clone(),
            buf,
            lkey: mr.lkey,
            rkey: mr.rkey,
            addr: mr.iova,
            live: true,
        })
    }

    /// A memory window (`ibv_alloc_mw`), unbound until a bind: type 1 with
    /// [`crate::QueuePair::bind_mw`], type 2 with a BIND_MW work request.
    pub fn alloc_mw(&self, mw_type: oxrdma_core::MwType) -> Result<MemoryWindow> {
        let (handle, _) = self.ctx.shared().lock().engine.alloc_mw(self.pd, mw_type)?;
        Ok(MemoryWindow {
            ctx: self.ctx.clone(),
            handle,
            live: true,
        })
    }

    /// An address handle: where UD sends go (`ibv_create_ah`), from the device GID
    /// [`Context::gid_index_for`] picks.
    pub fn create_ah(&self, dgid: oxrdma_core::Gid) -> Result<AddressHandle> {
        self.create_ah_av(oxrdma_core::AddressVector {
            dgid,
            sgid_index: self.ctx.gid_index_for(dgid),
        })
    }

    /// An address handle to `av.dgid` whose packets leave from the device's GID
    /// `av.sgid_index` (refused if its table has none there, or of the other IP family).
    pub fn create_ah_av(&self, av: oxrdma_core::AddressVector) -> Result<AddressHandle> {
        let ah = self.ctx.shared().lock().engine.create_ah(self.pd, av)?;
        Ok(AddressHandle {
            ctx: self.ctx.clone(),
            ah,
            live: true,
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
        self.ctx.claim(Source::Srq(srq));
        Ok(SharedReceiveQueue {
            ctx: self.ctx.clone(),
            srq,
            live: true,
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

    /// [`Self::create_qp`] with every option of `ibv_qp_init_attr`.
    pub fn create_qp_with(
        &self,
        send_cq: &crate::CompletionQueue,
        recv_cq: &crate::CompletionQueue,
        init: QpInit<'_>,
    ) -> Result<crate::QueuePair> {
        let attr = oxrdma_core::QpInitAttr {
            qp_type: init.qp_type,
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            srq: init.srq.map(|s| s.srq),
        };
        let mut dev = self.ctx.shared().lock();
        let qpn = dev.engine.create_qp(self.pd, &attr)?;
        let post = dev.engine.qp_post(qpn)?;
        self.ctx.claim(Source::Qp(qpn));
        drop(dev);
        Ok(crate::QueuePair {
            ctx: self.ctx.clone(),
            qpn,
            qp_type: init.qp_type,
            post,
            psn: std::sync::atomic::AtomicU32::new(self.ctx.random_psn()),
        })
    }
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

/// Registered memory. Remote peers reach it through `addr` and `rkey`; local work
/// requests through SGEs made by [`MemoryRegion::sge`].
///
/// The bytes are shared with the NIC: an RDMA operation may change them at any time while
/// one targeting them is in flight, exactly as with hardware. `read` and `write` copy with
/// relaxed atomic loads and stores, so a copy that races with a transfer sees some old and
/// some new bytes but is never undefined behaviour; [`MemoryRegion::as_slice`] lends the
/// bytes without a copy to a caller that promises no transfer writes them meanwhile.
///
/// ```
/// use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, SendWr};
/// use std::time::Duration;
/// # fn main() -> oxrdma::Result<()> {
/// let (a, b) = (Context::open("127.0.1.10".parse().unwrap())?,
///               Context::open("127.0.1.11".parse().unwrap())?);
/// let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
/// let ma = pa.register(64, Access::LOCAL_WRITE)?;
/// let mb = pb.register(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
/// // The program copies bytes in and out; a peer names them by address and rkey.
/// mb.write(100, b"registered bytes")?;
/// let part = mb.remote().slice(100..116)?;
/// assert!(mb.remote().slice(4000..4097).is_err(), "past the end");
/// let (ca, cb) = (a.create_cq(8)?, b.create_cq(8)?);
/// let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
/// let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
/// qa.connect(&qb.endpoint(), &ConnectOptions::default())?;
/// qb.connect(&qa.endpoint(), &ConnectOptions::default())?;
/// // a READs them into its own region, at the bytes an SGE of it names.
/// qa.post_send(SendWr::read(1, [ma.sge(8, 16)?], part)?)?;
/// assert_eq!(ca.wait_one(Duration::from_secs(10))?.result()?.byte_len, 16);
/// let mut back = [0u8; 16];
/// ma.read(8, &mut back)?;
/// assert_eq!(&back, b"registered bytes");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryRegion {
    ctx: Context,
    buf: Arc<SharedBuffer>,
    lkey: u32,
    rkey: u32,
    /// The address of the first byte as peers name it.
    addr: u64,
    live: bool,
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
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// The whole region as a peer names it (address, rkey, length), to send in an
    /// [`Endpoint`](crate::Endpoint) and aim work requests at.
    pub fn remote(&self) -> crate::RemoteBuf {
        crate::RemoteBuf::new(self.addr, self.rkey, self.buf.len() as u64)
            .expect("a registered region does not wrap")
    }
    /// An SGE for `len` bytes at offset `off`; an error if they are not all in the
    /// region (or `len` exceeds an SGE's 32 bits).
    pub fn sge(&self, off: usize, len: usize) -> Result<Sge> {
        self.range(off, len)?;
        let length = u32::try_from(len)
            .map_err(|_| VerbsError::InvalidArgument("an SGE holds 4 GiB less a byte at most"))?;
        Ok(Sge {
            addr: self.addr + off as u64,
            length,
            lkey: self.lkey,
        })
    }
    /// Copies `data` in at `off`; an error (and nothing copied) if it does not fit.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        self.range(off, data.len())?;
        self.buf.write(off, data);
        Ok(())
    }
    /// Copies bytes out from `off` into all of `out`; an error (and nothing copied) if the
    /// range does not fit.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        self.range(off, out.len())?;
        self.buf.read(off, out);
        Ok(())
    }
    /// `len` bytes at `off` are in the region.
    fn range(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.buf.len() => Ok(()),
            _ => Err(VerbsError::InvalidArgument("a range outside the memory region").into()),
        }
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
    ctx: Context,
    ah: u32,
    live: bool,
}

impl AddressHandle {
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
    ctx: Context,
    srq: u32,
    live: bool,
}

impl SharedReceiveQueue {
    /// The number its asynchronous events carry ([`oxrdma_core::AsyncEvent::Srq`]).
    pub fn id(&self) -> u32 {
        self.srq
    }

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
    /// `ibv_query_srq`: its depth and limit.
    pub fn query(&self) -> Result<oxrdma_core::SrqAttr> {
        Ok(self.ctx.shared().lock().engine.query_srq(self.srq)?)
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
    ctx: Context,
    handle: u32,
    live: bool,
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

crate::destroy::destroy_with! {
    /// `ibv_dealloc_pd`: busy while regions, windows, AHs, SRQs or QPs remain in it.
    ProtectionDomain.pd => dealloc_pd;
    /// `ibv_dereg_mr`: busy while memory windows are bound to it.
    MemoryRegion.lkey => dereg_mr;
    /// `ibv_destroy_ah`.
    AddressHandle.ah => destroy_ah;
    /// `ibv_destroy_srq`: busy while a QP uses it.
    SharedReceiveQueue.srq => destroy_srq, events Srq;
    /// `ibv_dealloc_mw`.
    MemoryWindow.handle => dealloc_mw;
}
