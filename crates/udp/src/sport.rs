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
//! device's own socket (4791): peers answer to 4791. Each pool socket is connected to the
//! first peer it sends to, which spares the kernel a route lookup per message to that peer
//! (`connected.rs`: how its IPv4 IDs are then known).

use crate::connected::{self, Ids};
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

/// A pool socket: its port, and where it is connected (see `connected.rs`).
#[derive(Debug)]
pub(crate) struct Source {
    pub socket: UdpSocket,
    pub port: u16,
    /// The peer it is connected to: packets to it go without an address.
    pub peer: Option<SocketAddr>,
    /// How the kernel numbers its IPv4 packets.
    pub ids: Ids,
    /// A send failed in a way that may have taken an ID: probe before the next.
    pub lost_count: bool,
    /// Connecting was tried (once: a socket serving several peers stays with its first).
    tried: bool,
}

impl Source {
    /// Connects the socket to `peer` unless that was tried before. False: the socket's
    /// packets can no longer be numbered (stop using it).
    pub fn connect_once(&mut self, peer: SocketAddr) -> bool {
        if std::mem::replace(&mut self.tried, true) {
            return true;
        }
        match connected::connect(&self.socket, peer) {
            Some(ids) => {
                (self.peer, self.ids) = (Some(peer), ids);
                true
            }
            // Not connected: packets go with an address and ID 0, as before.
            None => self.socket.peer_addr().is_err(),
        }
    }

    /// The IDs as the kernel will give them, probing again if they were lost track of.
    /// None: they cannot be known (stop using the socket).
    pub fn ids(&mut self) -> Option<Ids> {
        // Only a counter can be lost track of (unconnected and IPv6 sockets number nothing).
        let counted = matches!(self.ids, Ids::Counter(..));
        if std::mem::take(&mut self.lost_count) && counted {
            self.ids = connected::probe(&self.socket)?;
        }
        Some(self.ids)
    }
}

/// The sockets packets leave from.
#[derive(Debug)]
pub(crate) struct SourcePorts {
    ip: IpAddr,
    /// Bound on first use, with the port the kernel gave; `None` inside: binding failed
    /// or the socket was given up (the packets leave from the device's own socket).
    pool: Vec<Option<Option<Source>>>,
    /// Pool sockets that could not be bound (or were given up).
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
        bound.as_ref().map(|s| s.port)
    }

    /// The pool socket bound to `port`, if `port_for` gave it.
    pub fn get(&self, port: u16) -> Option<&Source> {
        self.pool
            .iter()
            .flatten()
            .flatten()
            .find(|s| s.port == port)
    }

    /// [`Self::get`], to change.
    pub fn get_mut(&mut self, port: u16) -> Option<&mut Source> {
        self.pool
            .iter_mut()
            .flatten()
            .flatten()
            .find(|s| s.port == port)
    }

    /// Gives up the socket bound to `port` (its packets' IDs cannot be known): its QPs
    /// send from the device's own socket from the next batch on.
    pub fn give_up(&mut self, port: u16) {
        for slot in self.pool.iter_mut().flatten() {
            if slot.as_ref().is_some_and(|s| s.port == port) {
                *slot = None;
                self.refused += 1;
            }
        }
    }
}

fn bind(addr: SocketAddr, setup: impl FnOnce(&UdpSocket) -> io::Result<()>) -> io::Result<Source> {
    let socket = UdpSocket::bind(addr)?;
    setup(&socket)?;
    let port = socket.local_addr()?.port();
    Ok(Source {
        socket,
        port,
        peer: None,
        ids: Ids::PerMessage,
        lost_count: false,
        tried: false,
    })
}
