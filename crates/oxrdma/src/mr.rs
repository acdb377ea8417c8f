//! Memory regions: bytes the region owns (or a caller lent), registered on an engine or
//! an rdma-core device, read and written by copying.

use crate::engine_context::EngineContext;
use crate::error::Result;
use crate::rdma_core;
use oxrdma_core::{Access, Sge, SharedBuffer, VerbsError};
use std::sync::Arc;

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
    owner: MrOwner,
    buf: Arc<SharedBuffer>,
    pub(crate) lkey: u32,
    rkey: u32,
    /// The address of the first byte as peers name it.
    pub(crate) addr: u64,
}

/// Who deregisters it.
#[derive(Debug)]
enum MrOwner {
    Engine(EngineMr),
    /// Deregistered as it drops.
    RdmaCore(rdma_core::Mr),
}

/// A region of an engine device.
#[derive(Debug)]
struct EngineMr {
    ctx: EngineContext,
    lkey: u32,
    live: bool,
}

crate::destroy::destroy_with! {
    /// `ibv_dereg_mr`.
    EngineMr.lkey => dereg_mr;
}

impl MemoryRegion {
    pub(crate) fn engine(
        ctx: &EngineContext,
        buf: Arc<SharedBuffer>,
        mr: &oxrdma_core::MemoryRegion,
    ) -> Self {
        MemoryRegion {
            owner: MrOwner::Engine(EngineMr {
                ctx: ctx.clone(),
                lkey: mr.lkey,
                live: true,
            }),
            buf,
            lkey: mr.lkey,
            rkey: mr.rkey,
            addr: mr.iova,
        }
    }

    pub(crate) fn rdma_core(
        pd: &Arc<rdma_core::Pd>,
        buf: Arc<SharedBuffer>,
        access: Access,
    ) -> Result<Self> {
        let mr = rdma_core::Mr::register(pd, buf.clone(), access)?;
        Ok(MemoryRegion {
            buf: buf.clone(),
            lkey: mr.lkey,
            rkey: mr.rkey,
            addr: buf.addr(),
            owner: MrOwner::RdmaCore(mr),
        })
    }

    /// `ibv_dereg_mr`: refused (EBUSY) while a memory window is bound to it (an engine
    /// device's); the region comes back with the error.
    pub fn try_destroy(self) -> std::result::Result<(), (Self, crate::Error)> {
        let MemoryRegion {
            owner,
            buf,
            lkey,
            rkey,
            addr,
        } = self;
        match owner {
            MrOwner::Engine(m) => m.try_destroy().map_err(|(m, e)| {
                let back = MemoryRegion {
                    owner: MrOwner::Engine(m),
                    buf,
                    lkey,
                    rkey,
                    addr,
                };
                (back, e)
            }),
            MrOwner::RdmaCore(m) => {
                drop(m);
                Ok(())
            }
        }
    }

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
