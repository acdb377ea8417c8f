//! The UDP driver: RoCEv2 packets to and from UDP port 4791, ICRC on every packet, and the
//! loop that drives an engine (the caller's) from a socket and the wall clock.

pub mod batch;
mod capture;
mod connected;
mod drops;
pub mod gso;
mod kernel;
pub mod link;
pub mod mtu;
pub mod port;
mod sockopt;
mod sport;
mod turnaround;

pub use drops::RxDropReport;
pub use kernel::KernelUdpDrops;
pub use link::Link;
pub use port::{BindError, PortStats, UdpPort};
pub use sport::SOURCE_PORTS;
