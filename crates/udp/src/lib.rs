//! The UDP driver: RoCEv2 packets to and from UDP port 4791, ICRC on every packet, and the
//! loop that drives an engine from a socket and the wall clock.

pub mod batch;
mod capture;
mod connected;
pub mod device;
mod drops;
pub mod gso;
mod kernel;
pub mod mtu;
pub mod port;
mod sockopt;
mod sport;

pub use device::Device;
pub use drops::RxDropReport;
pub use kernel::KernelUdpDrops;
pub use port::{BindError, PortStats, UdpPort};
pub use sport::SOURCE_PORTS;
