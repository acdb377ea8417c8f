//! oxrdma: RDMA verbs over RoCEv2 in user space.
//!
//! Open a device by IP address, allocate a protection domain, register memory, create
//! completion queues and queue pairs, connect, post work requests and poll completions.
//! An engine thread per device plays the NIC. See `examples/rc_write_read_send.rs`.
//!
//! Everything here is safe to call: memory regions own their bytes and are read and written
//! by copying, and the engine checks every key, bound and permission.

#[cfg(feature = "tokio")]
pub mod aio;
mod channel;
mod channel_events;
pub mod cm;
pub mod config;
mod connect;
mod context;
mod cores;
mod cq;
mod destroy;
mod device;
mod endpoint;
mod error;
mod events;
mod fdqueue;
mod handoff;
pub mod host_stats;
mod lock;
mod nic;
mod pd;
mod qp;
pub mod rsocket;
mod secure;
mod shared;
mod sleeper;

pub use channel::{ChannelStats, CompletionChannel};
pub use connect::{exchange, PeerInfo};
pub use context::{Context, WeakDevice};
/// The engine and its link, for tools that drive them by hand (`oxrdma scale`).
pub mod raw {
    pub use crate::device::Device;
}
pub use cq::CompletionQueue;
pub use endpoint::Endpoint;
pub use error::{Error, Result};
pub use oxrdma_core::cm::CmError;
pub use oxrdma_core::secure::Suite;
pub use oxrdma_core::RemoteBuf;
pub use oxrdma_udp::{interfaces, BindError, RxDropReport};
pub use pd::{
    AddressHandle, MemoryRegion, MemoryWindow, ProtectionDomain, QpInit, SharedReceiveQueue,
};
pub use qp::{ConnectOptions, PostList, QueuePair};
pub use secure::PublicKey;

/// `enum ibv_qp_attr_mask` bits (what a [`QpAttr`] sets is its `mask()`).
pub use oxrdma_core::mask as qp_attr_mask;
pub use oxrdma_core::{
    Access, AddressVector, AsyncEvent, Counter, Counters, DeviceAttr, EventType, Gid, InlineData,
    Mtu, MwBind, MwType, QpAttr, QpCap, QpState, QpType, RecvWr, RxDrop, RxDrops, SendData,
    SendFlags, SendWr, Sge, SgeList, SrqAttr, UdDest, VerbsError, WcError, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
