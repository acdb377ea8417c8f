//! oxrdma: RDMA verbs over RoCEv2 in user space, wire-compatible with Linux rxe.
//!
//! Open a device by IP address ([`Context::open`]), allocate a protection domain, register
//! memory, create completion queues and queue pairs, connect, post work requests and wait
//! for their completions. An engine thread per device plays the NIC; no kernel module, no
//! root.
//!
//! ```
//! use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, SendWr};
//! use std::time::Duration;
//!
//! # fn main() -> oxrdma::Result<()> {
//! // Two devices of this host (any two loopback addresses), each with memory and an RC QP.
//! let (a, b) = (Context::open("127.0.0.241".parse().unwrap())?,
//!               Context::open("127.0.0.242".parse().unwrap())?);
//! let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (ma, mb) = (pa.register(4096, Access::LOCAL_WRITE)?,
//!                 pb.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ)?);
//! let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
//! let qa = pa.create_qp(&ca, &ca, QpType::Rc, QpCap::default())?;
//! let qb = pb.create_qp(&cb, &cb, QpType::Rc, QpCap::default())?;
//!
//! // What each tells the other (over TCP, say: `Endpoint::exchange`): its QP and, for b,
//! // the memory a may use.
//! let ea = qa.endpoint();
//! let eb = qb.endpoint().with_buffer(mb.remote());
//! qa.connect(&eb, &ConnectOptions::default())?;
//! qb.connect(&ea, &ConnectOptions::default())?;
//!
//! // An RDMA WRITE into b's memory, then a READ of it back; b's CPU takes no part.
//! ma.write(0, b"hello, remote memory")?;
//! qa.post_send(SendWr::write(1, [ma.sge(0, 20)?], eb.buffers[0])?)?;
//! ca.wait_one(Duration::from_secs(10))?.result()?;
//! qa.post_send(SendWr::read(2, [ma.sge(100, 20)?], eb.buffers[0])?)?;
//! ca.wait_one(Duration::from_secs(10))?.result()?;
//! let mut back = [0u8; 20];
//! ma.read(100, &mut back)?;
//! assert_eq!(&back, b"hello, remote memory");
//! # Ok(())
//! # }
//! ```
//!
//! Connections are made out of band ([`Endpoint`], [`Endpoint::exchange`]), through the
//! RDMA CM ([`cm::connect`], [`cm::Listener`], or librdmacm's event API on [`cm::CmId`]),
//! or as streams ([`rsocket::RStream`], `Read` and `Write`). Completions are polled
//! ([`CompletionQueue::poll`]), waited for ([`CompletionQueue::wait_one`]), or awaited on
//! tokio (`aio`, the `tokio` feature). QPs can be authenticated and encrypted between
//! oxrdma peers ([`QueuePair::secure_endpoint`], `cm::SecureMode`). The examples
//! directory holds complete programs (RC, the CM, rsockets).
//!
//! Everything here is safe to call: memory regions own their bytes and are read and written
//! by copying, and the engine checks every key, bound and permission.
#![deny(missing_docs)]

#[cfg(feature = "tokio")]
pub mod aio;
mod channel;
mod channel_events;
pub mod cm;
mod comp_channel;
pub mod config;
mod connect;
mod context;
mod cores;
mod cq;
mod destroy;
mod device;
mod endpoint;
mod engine_context;
mod error;
mod events;
mod fdqueue;
mod handoff;
pub mod host_stats;
pub mod iwarp;
mod lock;
mod mr;
mod nic;
mod objects;
mod pd;
mod qp;
mod qp_rdma_core;
pub mod rdma_core;
pub mod rsocket;
mod secure;
mod shared;
mod sleeper;

pub use channel::ChannelStats;
pub use comp_channel::CompletionChannel;
pub use connect::{exchange, PeerInfo};
pub use context::{Backend, Context, WeakDevice};
/// The engine and its link, for tools that drive them by hand (`oxrdma scale`).
pub mod raw {
    pub use crate::device::Device;
}
pub use cq::CompletionQueue;
pub use endpoint::Endpoint;
pub use error::{Error, Result};
pub use mr::MemoryRegion;
pub use objects::{AddressHandle, MemoryWindow, SharedReceiveQueue};
pub use oxrdma_core::cm::CmError;
pub use oxrdma_core::secure::Suite;
pub use oxrdma_core::RemoteBuf;
pub use oxrdma_udp::{interfaces, BindError, RxDropReport};
pub use pd::{ProtectionDomain, QpInit};
pub use qp::{ConnectOptions, PostList, QueuePair};
pub use secure::PublicKey;

/// `enum ibv_qp_attr_mask` bits (what a [`QpAttr`] sets is its `mask()`).
pub use oxrdma_core::mask as qp_attr_mask;
pub use oxrdma_core::{
    Access, AddressVector, AsyncEvent, Counter, Counters, DeviceAttr, DeviceTransport, EventType,
    Gid, InlineData, Mtu, MwBind, MwType, QpAttr, QpCap, QpState, QpType, RecvWr, RxDrop, RxDrops,
    SendData, SendFlags, SendWr, Sge, SgeList, SrqAttr, UdDest, VerbsError, WcError, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
