//! UDP source ports. RoCEv2 fixes the destination port (4791) and leaves the source port
//! to the sender as flow entropy: switches spread flows over equal-cost paths (ECMP) by
//! it, so traffic that all leaves from 4791 takes one path however many QPs carry it.
//! Linux rxe gives each QP its own (`oxrdma_core::rc_udp_sport`, which the engine puts in
//! every `Transmit`). A socket sends from the port it is bound to, and one system call
//! sends from one socket: a port per QP made `perf write-bw -q 64` 3x slower here (a batch
//! of 32 packets from 32 QPs took 32 `sendmmsg` instead of one GSO message). So a device
//! sends from a small pool of sockets on ports the kernel picks, each QP always from the
//! same one (its rxe port picks it): `SOURCE_PORTS` flows of entropy, at most that many
//! system calls per batch. `OXRDMA_SOURCE_PORTS=n` sets the pool's size (0: everything
//! from 4791, as before; fewest system calls on one path). Everything arrives on the
//! device's own socket (4791): peers answer to 4791.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// Sockets (and so source ports) a device sends from, unless `OXRDMA_SOURCE_PORTS` says.
pub const SOURCE_PORTS: usize = 8;

/// The pool's size: `OXRDMA_SOURCE_PORTS` if it is a number, else `SOURCE_PORTS`.
fn pool_size() -> usize {
    std::env::var("OXRDMA_SOURCE_PORTS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(SOURCE_PORTS)
}

/// The sockets packets leave from.
#[derive(Debug)]
pub(crate) struct SourcePorts {
    ip: IpAddr,
    /// Bound on first use, with the port the kernel gave; `None` inside: binding failed
    /// (the packets leave from the device's own socket).
    pool: Vec<Option<Option<(UdpSocket, u16)>>>,
    /// Pool sockets that could not be bound.
    pub refused: u64,
}

impl SourcePorts {
    pub fn new(ip: IpAddr) -> SourcePorts {
        SourcePorts {
            ip,
            pool: (0..pool_size()).map(|_| None).collect(),
            refused: 0,
        }
    }

    /// The UDP source port a QP that asks for `sport` sends from (binding its pool socket
    /// the first time; `setup` readies it as the device's own), or None: from the device's
    /// own socket.
    pub fn port_for(
        &mut self,
        sport: u16,
        setup: impl FnOnce(&UdpSocket) -> io::Result<()>,
    ) -> Option<u16> {
        if self.pool.is_empty() {
            return None;
        }
        let n = self.pool.len();
        let slot = &mut self.pool[usize::from(sport) % n];
        let bound = slot.get_or_insert_with(|| {
            let s = bind(SocketAddr::new(self.ip, 0), setup).ok();
            self.refused += u64::from(s.is_none());
            s
        });
        bound.as_ref().map(|(_, port)| *port)
    }

    /// The pool socket bound to `port`, if `port_for` gave it.
    pub fn socket(&self, port: u16) -> Option<&UdpSocket> {
        self.pool
            .iter()
            .flatten()
            .flatten()
            .find(|(_, p)| *p == port)
            .map(|(s, _)| s)
    }
}

fn bind(
    addr: SocketAddr,
    setup: impl FnOnce(&UdpSocket) -> io::Result<()>,
) -> io::Result<(UdpSocket, u16)> {
    let socket = UdpSocket::bind(addr)?;
    setup(&socket)?;
    let port = socket.local_addr()?.port();
    Ok((socket, port))
}
