//! Every receive drop of one device in one place: the kernel's, the port's and the
//! engine's, so "the peer sends but nothing arrives" is a one-line diagnosis.

use crate::kernel::KernelUdpDrops;
use crate::port::PortStats;
use oxrdma_core::RxDrops;
use std::fmt;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxDropReport {
    /// Datagrams the socket took in.
    pub received: u64,
    /// Dropped by the port before the engine saw them.
    pub port: PortStats,
    /// Dropped by the engine, by reason.
    pub engine: RxDrops,
    /// Dropped by the kernel before the socket: for the whole network namespace, since
    /// the device opened (other programs' datagrams count too).
    pub kernel: KernelUdpDrops,
}

impl RxDropReport {
    /// Whether anything at all was dropped.
    pub fn any(&self) -> bool {
        self.port.rx_bad_icrc
            + self.port.rx_bad_source
            + self.port.rx_left_by_gone
            + self.port.rx_overflow
            + self.engine.total()
            + self.kernel.errors
            > 0
    }
}

impl fmt::Display for RxDropReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} datagrams received ({} from loopback, ICRC unchecked); dropped by the port: \
             {} bad ICRC, {} without source, {} left for a process that had gone; by the \
             kernel, the port's receive buffer full: {}; by the engine: {}; by the kernel \
             (whole network namespace): {}",
            self.received,
            self.port.icrc_unchecked_loopback,
            self.port.rx_bad_icrc,
            self.port.rx_bad_source,
            self.port.rx_left_by_gone,
            self.port.rx_overflow,
            self.engine,
            self.kernel
        )
    }
}
