//! The public device context: an engine device (`engine_context.rs`, the software NIC) or
//! a device of the system's rdma-core (`rdma_core/`), behind one type.

use crate::cq::EngineCq;
use crate::engine_context::{EngineContext, Inner};
use crate::error::{Error, Result};
use crate::pd::EnginePd;
use crate::rdma_core::{self, RdmaCoreContext};
use std::net::IpAddr;
use std::sync::{Arc, Weak};

/// An open RDMA device. By default oxrdma's engine: one IP address, UDP port 4791, one
/// engine thread (a software NIC). Or a device of the system's rdma-core (a ConnectX NIC,
/// Linux rxe): [`Context::open_rdma_core`], or `OXRDMA_BACKEND=rdma-core` for
/// [`Context::open`]; the same program runs on either. Clones are the same context;
/// [`Context::open_again`] opens another context on the same device, as a second
/// `ibv_open_device` does.
///
/// ```
/// use oxrdma::{Access, Backend, Context, QpCap, QpState, QpType};
/// # fn main() -> oxrdma::Result<()> {
/// let ip = "127.0.1.8".parse().unwrap();
/// let ctx = Context::open_engine(ip)?;
/// assert_eq!(ctx.gid().ip(), ip);
/// assert_eq!(ctx.backend(), Backend::Engine);
/// // The rest is made through it: PDs, CQs and completion channels, and in a PD the
/// // memory regions and QPs, within the device's limits.
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(16)?;
/// let mr = pd.register(4096, Access::LOCAL_WRITE)?;
/// assert!(mr.len() as u64 <= ctx.attr().max_mr_size);
/// let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
/// assert_eq!(qp.state()?, QpState::Reset);
/// // Another context of the same device: the same NIC, its own asynchronous events.
/// let again = ctx.open_again()?;
/// assert!(again.same_device(&ctx));
/// assert_eq!(again.poll_event(), None);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) kind: Kind,
}

#[derive(Clone)]
pub(crate) enum Kind {
    Engine(EngineContext),
    RdmaCore(Arc<RdmaCoreContext>),
}

/// A device that may be open: does not keep it open, and opens another context on it
/// while some context of it is ([`WeakDevice::open_again`]). An engine device's.
#[derive(Clone, Debug, Default)]
pub struct WeakDevice {
    inner: Weak<Inner>,
}

impl WeakDevice {
    /// A new context on the device, if some context still holds it open.
    pub fn open_again(&self) -> Option<Result<Context>> {
        let inner = self.inner.upgrade()?;
        Some(EngineContext::on(inner).map(Context::from))
    }

    /// Whether some context still holds the device open.
    pub fn is_open(&self) -> bool {
        self.inner.strong_count() > 0
    }
}

/// Which implementation runs a [`Context`]'s device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// oxrdma's engine: RoCEv2 in software over UDP (the default).
    Engine,
    /// A device of the system's libibverbs (rdma-core): hardware, rxe or siw.
    RdmaCore,
}

impl From<EngineContext> for Context {
    fn from(e: EngineContext) -> Context {
        Context {
            kind: Kind::Engine(e),
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Engine(e) => e.fmt(f),
            Kind::RdmaCore(r) => write!(f, "Context({}, rdma-core {})", self.gid(), r.dev.name),
        }
    }
}

/// What `OXRDMA_BACKEND` asks [`Context::open`] for.
pub(crate) fn backend_from_env() -> Result<Backend> {
    match std::env::var("OXRDMA_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("engine") => Ok(Backend::Engine),
        Ok("rdma-core") => Ok(Backend::RdmaCore),
        Ok(other) => Err(Error::Config(format!(
            "OXRDMA_BACKEND={other}: expected engine or rdma-core"
        ))),
    }
}

impl Context {
    /// Opens the device whose GID is `ip` (an address of this host). On the engine
    /// (the default), this user's processes share it as a NIC's: each owns some of the
    /// QPNs (up to 64 processes on one address); `OXRDMA_SHARE=0` makes it
    /// [`Context::open_alone`]. With `OXRDMA_BACKEND=rdma-core`, the rdma-core device
    /// that has `ip` among its RoCE v2 GIDs instead.
    pub fn open(ip: IpAddr) -> Result<Context> {
        match backend_from_env()? {
            Backend::Engine => Self::open_engine(ip),
            Backend::RdmaCore => Self::from_rdma_core(rdma_core::Device::open_by_ip(ip)?),
        }
    }

    /// Opens the engine device whose GID is `ip`, whatever `OXRDMA_BACKEND` says.
    pub fn open_engine(ip: IpAddr) -> Result<Context> {
        EngineContext::open(ip).map(Context::from)
    }

    /// Opens an iWARP device on `ip` (an address of this host), as `rdma link add siw0
    /// type siw` makes one: its QPs are RC QPs whose transport is a TCP connection each,
    /// set up with [`crate::iwarp::connect`] and [`crate::iwarp::Listener`] (iWARP has
    /// no out-of-band QP attributes).
    pub fn open_iwarp(ip: IpAddr) -> Result<Context> {
        EngineContext::open_iwarp(ip).map(Context::from)
    }

    /// Opens the engine device whose GID is `ip` for this process alone: refused if
    /// another process uses the address.
    pub fn open_alone(ip: IpAddr) -> Result<Context> {
        EngineContext::open_alone(ip).map(Context::from)
    }

    /// Opens an engine device on network interface `name` (as `rdma link add rxe0 type
    /// rxe netdev NAME`): its GID table holds the interface's addresses in rxe's order
    /// (the default link-local GID, the IPv4 addresses, the other IPv6 ones), each shared
    /// with this user's other processes as [`Context::open`]'s; [`Context::gid`] is its
    /// main one.
    pub fn open_interface(name: &str) -> Result<Context> {
        EngineContext::open_interface(name).map(Context::from)
    }

    /// Opens the device `name` of the system's rdma-core (`ibv_devices` lists them:
    /// `mlx5_0`, `rxe0`), through its `libibverbs.so.1` (`OXRDMA_LIBIBVERBS` names
    /// another file), loaded now. What the backend covers: `oxrdma::rdma_core`.
    pub fn open_rdma_core(name: &str) -> Result<Context> {
        Self::from_rdma_core(rdma_core::Device::open(name)?)
    }

    fn from_rdma_core(dev: rdma_core::Device) -> Result<Context> {
        Ok(Context {
            kind: Kind::RdmaCore(Arc::new(RdmaCoreContext::new(dev)?)),
        })
    }

    /// Which implementation runs this device.
    pub fn backend(&self) -> Backend {
        match self.kind {
            Kind::Engine(_) => Backend::Engine,
            Kind::RdmaCore(_) => Backend::RdmaCore,
        }
    }

    /// The engine context, or the error that names `what` as the engine's alone.
    pub(crate) fn engine(&self, what: &'static str) -> Result<&EngineContext> {
        match &self.kind {
            Kind::Engine(e) => Ok(e),
            Kind::RdmaCore(_) => Err(Error::Unsupported(what)),
        }
    }

    /// Another context on this context's device (what a second `ibv_open_device` of one
    /// device gives on a NIC): the same address, GID and engine, so QPs of the two reach
    /// each other through the one port and name each other by QPN; its own asynchronous
    /// events and descriptor. The device closes when the last context of it goes. On
    /// rdma-core, another `ibv_open_device` of the device.
    pub fn open_again(&self) -> Result<Context> {
        match &self.kind {
            Kind::Engine(e) => e.open_again().map(Context::from),
            Kind::RdmaCore(r) => Context::open_rdma_core(&r.dev.name),
        }
    }

    /// This context's device, without keeping it open (to open it again while it is, as
    /// the C library does when a program opens one device twice). An rdma-core device's
    /// is never open again.
    pub fn weak_device(&self) -> WeakDevice {
        match &self.kind {
            Kind::Engine(e) => WeakDevice {
                inner: e.downgrade(),
            },
            Kind::RdmaCore(_) => WeakDevice::default(),
        }
    }

    /// Whether `self` and `other` are contexts of the same open device.
    pub fn same_device(&self, other: &Context) -> bool {
        match (&self.kind, &other.kind) {
            (Kind::Engine(a), Kind::Engine(b)) => a.same_device(b),
            (Kind::RdmaCore(a), Kind::RdmaCore(b)) => Arc::ptr_eq(&a.dev, &b.dev),
            _ => false,
        }
    }

    /// The device's counters now: traffic by opcode class, every drop by reason, NAKs,
    /// retransmissions, timeouts, congestion notification (`Counter` names each, with
    /// rxe's and mlx5's names where they mean the same). A copy, taken under the device
    /// lock; QPs destroyed still count. `oxrdma stats` shows every device of the host.
    /// All zero on an rdma-core device (its provider's are in sysfs, `rdma statistic`).
    pub fn counters(&self) -> oxrdma_core::Counters {
        match &self.kind {
            Kind::Engine(e) => e.counters(),
            Kind::RdmaCore(_) => oxrdma_core::Counters::default(),
        }
    }

    /// The OS thread id of the device's engine thread (the software NIC; None if it has
    /// died, or on an rdma-core device): to pin it to a core (`taskset -p`), or to read
    /// the CPU time it uses (`/proc/self/task/<tid>/schedstat`).
    pub fn engine_tid(&self) -> Option<i32> {
        self.engine("").ok()?.engine_tid()
    }

    /// This device's main GID (its IP address, IPv4 as `::ffff:a.b.c.d`; a device on an
    /// interface: its first IPv4 address, else its first global one, `main_gid`).
    pub fn gid(&self) -> oxrdma_core::Gid {
        match &self.kind {
            Kind::Engine(e) => e.gid(),
            Kind::RdmaCore(r) => r.dev.main_gid(),
        }
    }

    /// The index of the device GID that sends to `dest` by default: the main one if it is
    /// of `dest`'s IP family, else the first of that family and scope (link-local or
    /// not), else the first of the family, else 0 (RoCE v2 GIDs only on rdma-core).
    pub fn gid_index_for(&self, dest: oxrdma_core::Gid) -> u8 {
        match &self.kind {
            Kind::Engine(e) => e.gid_index_for(dest),
            Kind::RdmaCore(r) => r.dev.gid_index_for(dest),
        }
    }

    /// Whether the device is free to take within `within` (nobody holds it then). At
    /// `exit`, a thread that a signal interrupted inside the library may hold it for good:
    /// an exit handler asks before it tears anything down.
    pub fn free_within(&self, within: std::time::Duration) -> bool {
        match &self.kind {
            Kind::Engine(e) => e.free_within(within),
            Kind::RdmaCore(_) => true,
        }
    }

    /// This device's GID table, by index (one entry, unless the device is on an
    /// interface: then its addresses in Linux rxe's order; on rdma-core, its port's
    /// table with every entry that is not RoCE v2 zero).
    pub fn gids(&self) -> &[oxrdma_core::Gid] {
        match &self.kind {
            Kind::Engine(e) => e.gids(),
            Kind::RdmaCore(r) => &r.dev.gids,
        }
    }

    /// Writes every RoCEv2 packet this device sends or receives to a pcap file (raw IP
    /// frames with the headers they had on the wire), until the device closes. An engine
    /// device's.
    pub fn capture_to(&self, path: &std::path::Path) -> Result<()> {
        self.engine("captures")?.capture_to(path)
    }

    /// The index of the network interface that holds the device's address (the GID
    /// table's `ndev_ifindex`), or 0 if none is found (or on rdma-core).
    pub fn ifindex(&self) -> u32 {
        self.engine("").map_or(0, |e| e.ifindex())
    }

    /// The port's active MTU: the largest path MTU a QP may use (from the interface MTU).
    pub fn active_mtu(&self) -> oxrdma_core::Mtu {
        match &self.kind {
            Kind::Engine(e) => e.active_mtu(),
            Kind::RdmaCore(r) => r.dev.active_mtu,
        }
    }

    /// Every received packet dropped so far, by who dropped it (kernel, port, engine) and
    /// why: the first thing to look at when a peer seems to send nothing (none on
    /// rdma-core).
    pub fn rx_drops(&self) -> oxrdma_udp::RxDropReport {
        self.engine("")
            .map_or_else(|_| Default::default(), |e| e.rx_drops())
    }

    /// How the device carries the verbs: InfiniBand's transport (RoCE: node type CA) or
    /// iWARP's (node type RNIC: [`Context::open_iwarp`], or an rdma-core iWARP device).
    pub fn transport(&self) -> oxrdma_core::DeviceTransport {
        match &self.kind {
            Kind::Engine(e) => e.transport(),
            Kind::RdmaCore(r) => r.dev.transport,
        }
    }

    /// Device limits.
    pub fn attr(&self) -> oxrdma_core::DeviceAttr {
        match &self.kind {
            Kind::Engine(e) => e.attr(),
            Kind::RdmaCore(r) => r.dev.attr,
        }
    }

    /// A protection domain.
    pub fn alloc_pd(&self) -> Result<crate::ProtectionDomain> {
        Ok(match &self.kind {
            Kind::Engine(e) => EnginePd::alloc(e)?.into(),
            Kind::RdmaCore(r) => crate::ProtectionDomain::rdma_core(r)?,
        })
    }

    /// A completion queue of `depth` entries.
    pub fn create_cq(&self, depth: u32) -> Result<crate::CompletionQueue> {
        Ok(match &self.kind {
            Kind::Engine(e) => EngineCq::create(e, depth)?.into(),
            Kind::RdmaCore(r) => crate::CompletionQueue::rdma_core(&r.dev, depth)?,
        })
    }

    /// A completion channel: a file descriptor that becomes readable when an armed CQ gets
    /// a completion (use it with epoll, poll or an async runtime).
    pub fn create_comp_channel(&self) -> Result<crate::CompletionChannel> {
        match &self.kind {
            Kind::Engine(e) => e.create_comp_channel(),
            Kind::RdmaCore(_) => crate::CompletionChannel::rdma_core(),
        }
    }

    /// The next asynchronous event, without waiting: CQ overflow, QP errors and
    /// communication established, SRQ limit reached, last WQE reached (on rdma-core, the
    /// provider's events of these kinds; its port and device events are passed over).
    pub fn poll_event(&self) -> Option<oxrdma_core::AsyncEvent> {
        match &self.kind {
            Kind::Engine(e) => e.poll_event(),
            Kind::RdmaCore(r) => r.poll_event(),
        }
    }

    /// The next asynchronous event (`ibv_get_async_event`): waits for one, unless
    /// [`Context::async_fd`] was made non-blocking (then `Ok(None)` when none waits).
    pub fn get_async_event(&self) -> Result<Option<oxrdma_core::AsyncEvent>> {
        match &self.kind {
            Kind::Engine(e) => e.get_async_event(),
            Kind::RdmaCore(r) => r.get_async_event(),
        }
    }

    /// A descriptor readable exactly while asynchronous events wait
    /// (`ibv_context.async_fd`).
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match &self.kind {
            Kind::Engine(e) => e.async_fd(),
            Kind::RdmaCore(r) => r.async_fd(),
        }
    }

    /// How many doorbells posting threads have rung on this device: one per `post_send`
    /// call, one per [`crate::QueuePair::post_list`] however many WRs it holds (a NIC's
    /// doorbell counter; each one drives the device once). 0 on rdma-core.
    pub fn doorbells(&self) -> u64 {
        self.engine("").map_or(0, |e| e.doorbells())
    }

    /// A random 24-bit PSN from a CSPRNG (the engine's, or the OS's).
    pub fn random_psn(&self) -> u32 {
        match &self.kind {
            Kind::Engine(e) => e.random_psn(),
            Kind::RdmaCore(r) => r.random_psn(),
        }
    }
}
