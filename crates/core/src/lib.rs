//! The sans-IO heart of oxrdma: verbs objects (protection domains, memory regions,
//! completion queues, queue pairs) and the RoCEv2 reliable-connected transport as pure
//! logic. Packets and time go in; packets, memory effects and completions come out. No
//! sockets, threads or clocks: drivers (UDP, the simulator) provide those.

#![deny(missing_docs)]

mod attr;
mod build;
pub mod cm;
mod counters;
mod cq;
mod crc_copy;
mod ctx;
pub mod driving;
mod drops;
mod engine;
mod error;
mod gid;
pub mod grh;
pub mod iwarp;
mod keys;
mod limits;
pub mod memory;
mod mr;
mod mw;
mod qp;
mod remote;
pub mod secure;
mod send_wr;
pub mod slot;
mod srq;
mod timers;
pub mod verbs;
mod wr;

pub use attr::{mask, AddressVector, QpAttr, QpCap, QpInitAttr};
pub use counters::{classes, Counter, Counters, COUNTERS};
pub use cq::CqRing;
pub use drops::{RxDrop, RxDrops};
pub use engine::{Engine, EngineConfig, IwarpStream, Stats, Transmit};
pub use error::{Result, VerbsError};
pub use gid::{main_gid, rc_udp_sport, Gid};
pub use limits::{apply_limits, AtomicCap, DeviceAttr, PeerLimits, MAX_PACKET};
pub use memory::SharedBuffer;
pub use mr::MemoryRegion;
pub use qp::{Doorbells, QpPost, QpTransport};
pub use remote::RemoteBuf;
pub use slot::Slot;
pub use srq::SrqAttr;
pub use verbs::{
    Access, AsyncEvent, DeviceTransport, EventType, Mtu, MwType, QpState, QpType, SendFlags,
    WcOpcode, WcStatus, WrOpcode,
};
pub use wr::{
    InlineData, MwBind, RecvWr, SendData, SendWr, Sge, SgeList, UdDest, WcError, WorkCompletion,
};

/// Time in nanoseconds on the driver's clock (virtual in the simulator).
pub type Nanos = u64;
