//! One RoCEv2 port: a UDP socket bound to one IP address and port 4791.
//!
//! ICRCs: on send, the kernel builds the IP header, so the ICRC is computed over the header
//! it will send: IPv4 with DF set and the Identification the kernel will write (an
//! unconnected socket with `IP_PMTUDISC_DO` sends ID 0 on Linux, segment k of a GSO message
//! ID k, see `gso.rs`; the source-port sockets are connected and count theirs, see
//! `connected.rs`), the socket's own UDP source port. On receive the
//! socket shows neither the IP header nor the IPv4 ID: IPv6 packets are checked exactly;
//! IPv4 packets are checked with the ID solved from the ICRC (see
//! `oxrdma_wire::icrc_id`): a packet passes only if some ID makes its ICRC right.

use crate::batch::{RxBatch, TxBatch, BATCH};
use crate::connected::{Before, Ids};
use crate::gso;
use crate::sport::SourcePorts;
use oxrdma_core::Gid;
use oxrdma_wire::{icrc, icrc_id, icrc_part, ROCE_V2_PORT};
use rustix::net::sockopt;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::ops::Range;

pub use crate::bind_error::BindError;

/// Counters of what the port moved and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx: u64,
    pub tx: u64,
    /// Dropped: the ICRC does not verify (corrupted, or truncated by the receive buffer).
    pub rx_bad_icrc: u64,
    /// Dropped: the kernel gave no IPv4 or IPv6 source address.
    pub rx_bad_source: u64,
    /// Dropped: what waited in the slot's socket when this port took the slot, for a
    /// process that had gone (`group.rs`).
    pub rx_left_by_gone: u64,
    /// ICMP errors reported for earlier sends (port or host unreachable).
    pub icmp_errors: u64,
    /// Source-port sockets (`crate::SOURCE_PORTS`) that could not be bound: their QPs'
    /// packets left from 4791.
    pub source_ports_refused: u64,
    /// Accepted without checking their ICRC: they came from a loopback address
    /// (`UdpPort::check_loopback_icrc`).
    pub icrc_unchecked_loopback: u64,
    /// UDP messages sent (a GSO run is one), and the system calls that sent them.
    pub tx_messages: u64,
    pub tx_calls: u64,
    /// UDP messages received (one GRO glued is one), and the system calls that brought
    /// any.
    pub rx_messages: u64,
    pub rx_calls: u64,
    /// Datagrams the kernel dropped because the socket's receive buffer was full
    /// (`SO_RXQ_OVFL`), as far as the messages received since say.
    pub rx_overflow: u64,
    /// Packets the kernel refused to send (an error other than a full buffer or an ICMP
    /// report).
    pub tx_errors: u64,
}

impl std::ops::AddAssign for PortStats {
    fn add_assign(&mut self, o: PortStats) {
        self.rx += o.rx;
        self.tx += o.tx;
        self.rx_bad_icrc += o.rx_bad_icrc;
        self.rx_bad_source += o.rx_bad_source;
        self.rx_left_by_gone += o.rx_left_by_gone;
        self.icmp_errors += o.icmp_errors;
        self.source_ports_refused += o.source_ports_refused;
        self.icrc_unchecked_loopback += o.icrc_unchecked_loopback;
        self.tx_messages += o.tx_messages;
        self.tx_calls += o.tx_calls;
        self.rx_messages += o.rx_messages;
        self.rx_calls += o.rx_calls;
        self.rx_overflow += o.rx_overflow;
        self.tx_errors += o.tx_errors;
    }
}

impl PortStats {
    /// How well packets were batched: per UDP message (what GSO and GRO glue) and per
    /// system call, each way. Every UDP message costs the kernel and the peer about what a
    /// packet alone would; `OXRDMA_BATCHES=1` prints this when a device closes.
    pub fn batching(&self) -> String {
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        format!(
            "sent {} packets in {} messages ({:.1} a message) by {} calls ({:.1} messages a \
             call); received {} packets in {} messages ({:.1} a message) by {} calls ({:.1} \
             messages a call)",
            self.tx,
            self.tx_messages,
            per(self.tx, self.tx_messages),
            self.tx_calls,
            per(self.tx_messages, self.tx_calls),
            self.rx,
            self.rx_messages,
            per(self.rx, self.rx_messages),
            self.rx_calls,
            per(self.rx_messages, self.rx_calls),
        )
    }
}

/// Whether ports share their address with this user's other processes: unless
/// `OXRDMA_SHARE=0`.
pub(crate) fn share_wanted() -> bool {
    std::env::var("OXRDMA_SHARE").map_or(true, |v| v != "0")
}

/// Linux's `UDP_NO_CHECK6_RX` (linux/udp.h), which the libc crate lacks.
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Lets an IPv6 socket take datagrams whose UDP checksum is zero. Linux rxe sends every
/// RoCEv2 packet so (the ICRC protects it; RFC 6935 allows zero checksums for tunnels),
/// and without this the kernel drops each one as a checksum error before we see it.
fn accept_zero_udp_checksums(socket: &UdpSocket) -> io::Result<()> {
    set_udp_option(socket, UDP_NO_CHECK6_RX, 1)
}

/// Sets the integer UDP-level socket option `name`.
fn set_udp_option(socket: &UdpSocket, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    crate::sockopt::set_int(socket, libc::IPPROTO_UDP, name, value)
}

/// Readies a socket to send RoCEv2 packets as the kernel must send them for our ICRC to
/// hold (IPv4: DF set, and so Identification 0 on Linux), ECN-capable (`ecn_wanted`),
/// with room for bursts, and non-blocking.
fn ready_to_send(socket: &UdpSocket) -> io::Result<()> {
    let v4 = socket.local_addr()?.is_ipv4();
    if v4 {
        sockopt::set_ip_mtu_discover(socket, sockopt::Ipv4PathMtuDiscovery::DO)?;
    }
    if ecn_wanted() {
        // ECT(0), as RoCEv2 NICs mark theirs: a router that marks ECN then marks our
        // packets CE where it would drop them. The ICRC masks the field.
        let _ = if v4 {
            rustix::net::sockopt::set_ip_tos(socket, ECT0)
        } else {
            rustix::net::sockopt::set_ipv6_tclass(socket, ECT0.into())
        };
    }
    let _ = sockopt::set_socket_send_buffer_size(socket, 4 << 20);
    socket.set_nonblocking(true)
}

/// The ECN field's ECT(0) codepoint (RFC 3168).
const ECT0: u8 = 0b10;

/// Whether `OXRDMA_ECN` leaves ECN on (anything but `0`): packets go ECN-capable, and
/// those that arrive marked CE are told to the engine (which answers with CNPs).
fn ecn_wanted() -> bool {
    std::env::var_os("OXRDMA_ECN").is_none_or(|v| v != "0")
}

/// Whether `OXRDMA_UDP_OFFLOAD` leaves segmentation offload on (anything but `0`).
fn offload_wanted() -> bool {
    std::env::var_os("OXRDMA_UDP_OFFLOAD").is_none_or(|v| v != "0")
}

/// Whether the kernel knows `UDP_SEGMENT` (Linux 4.18 and later).
fn gso_offered(socket: &UdpSocket) -> bool {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid descriptor; `v` and `len` are live and sized as passed.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&raw mut v).cast(),
            &mut len,
        )
    };
    rc == 0
}

/// The errors with which a kernel refuses to segment a message on its route.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP)
    )
}

fn is_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::ConnectionReset
    )
}

pub struct UdpPort {
    socket: UdpSocket,
    /// The address's group, where this process shares it with others (`group.rs`):
    /// `socket` is its slot's.
    group: Option<crate::group::Group>,
    local: SocketAddr,
    pub stats: PortStats,
    /// Writes every packet sent and received (as raw IP) to a pcap file.
    capture: Option<crate::capture::Capture>,
    /// Runs of packets to one peer go as one message (UDP GSO), where the kernel offers it.
    gso: bool,
    /// The kernel may hand over runs of packets from one peer as one message (UDP GRO).
    gro: bool,
    /// Solves received IPv4 packets' Identification, remembering per length.
    ids: icrc_id::IdVerifier,
    /// The sockets packets leave from when their QP asks for its own source port.
    sports: SourcePorts,
    /// Room for the runs of a batch (`send_batch`), kept between batches.
    runs: Vec<std::ops::Range<usize>>,
    /// Check the ICRC of packets from loopback addresses too (`check_loopback_icrc`).
    loopback_icrc: bool,
}

impl std::fmt::Debug for UdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UdpPort({})", self.local)
    }
}

/// The receive buffer a port asks for when it may (CAP_NET_ADMIN).
const RCVBUF_WANTED: usize = 32 << 20;

impl UdpPort {
    /// Binds `ip`:4791, shared with the other processes of this user that use the address
    /// (`group.rs`), unless `OXRDMA_SHARE=0` (then it is this process's alone).
    pub fn bind(ip: IpAddr) -> Result<UdpPort, BindError> {
        let addr = SocketAddr::new(ip, ROCE_V2_PORT);
        if !share_wanted() {
            return Self::bind_addr(addr);
        }
        let host =
            crate::host_slot::HostSlot::claim().map_err(|source| BindError::Io { addr, source })?;
        Self::bind_shared(addr, &std::sync::Arc::new(host))
    }

    /// Binds `addr` (port 4791; a link-local address with its interface's scope) in its
    /// group, in the device's slot `host` (`group.rs`).
    pub fn bind_shared(
        addr: SocketAddr,
        host: &std::sync::Arc<crate::host_slot::HostSlot>,
    ) -> Result<UdpPort, BindError> {
        let group = crate::group::Group::join(addr, host.clone())?;
        let socket = group
            .socket()
            .try_clone()
            .map_err(|source| BindError::Io { addr, source })?;
        let stale = group.stale as u64;
        let mut port = Self::with_socket(addr, socket, Some(group))?;
        port.stats.rx_left_by_gone = stale;
        Ok(port)
    }

    /// Binds `ip`:4791 for this process alone: refused if any other holds it.
    pub fn bind_alone(ip: IpAddr) -> Result<UdpPort, BindError> {
        Self::bind_addr(SocketAddr::new(ip, ROCE_V2_PORT))
    }

    /// Binds any address and port, alone (tests use other ports; peers always send to
    /// 4791).
    pub fn bind_addr(addr: SocketAddr) -> Result<UdpPort, BindError> {
        let socket = UdpSocket::bind(addr).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => BindError::InUse { addr },
            io::ErrorKind::AddrNotAvailable => BindError::NotLocal { addr },
            _ => BindError::Io { addr, source: e },
        })?;
        Self::with_socket(addr, socket, None)
    }

    /// Steers the connection requests for `service_id` to this port while the guard
    /// lives, where the address is shared (None where it is this process's alone).
    pub fn listen(&self, service_id: u64) -> io::Result<Option<crate::group::Listening>> {
        self.group
            .as_ref()
            .map(|g| g.listen(service_id))
            .transpose()
    }

    /// The slot this port owns where it shares its address, and the group's key.
    pub fn slot(&self) -> Option<oxrdma_core::Slot> {
        self.group.as_ref().map(crate::group::Group::slot)
    }

    /// Readies `socket`, bound to `addr`, as a port.
    fn with_socket(
        addr: SocketAddr,
        socket: UdpSocket,
        group: Option<crate::group::Group>,
    ) -> Result<UdpPort, BindError> {
        let io_err = |source| BindError::Io { addr, source };
        let local = socket.local_addr().map_err(io_err)?;
        ready_to_send(&socket).map_err(io_err)?;
        if local.is_ipv6() {
            accept_zero_udp_checksums(&socket).map_err(io_err)?;
        }
        // Bursts of MTU packets: give the kernel room. It caps SO_RCVBUF at rmem_max (4 MiB
        // on Debian); with CAP_NET_ADMIN, take more, so that a UC or UD burst of a whole
        // 8 MiB message (2,048 packets, which nothing retransmits) is not dropped.
        if sockopt::set_socket_recv_buffer_size_force(&socket, RCVBUF_WANTED).is_err() {
            let _ = sockopt::set_socket_recv_buffer_size(&socket, 4 << 20);
        }
        let gso = offload_wanted() && gso_offered(&socket);
        let gro = offload_wanted() && set_udp_option(&socket, libc::UDP_GRO, 1).is_ok();
        // The kernel's count of datagrams dropped for want of buffer room rides on the
        // messages received after a drop (none before: it costs nothing until then).
        let _ = crate::sockopt::set_int(&socket, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
        if ecn_wanted() && !local.ip().is_loopback() {
            // Each received message says its ECN field (GRO glues only packets alike). Not
            // on a loopback address, where no queue marks anything: the control message
            // cost a ping-pong's receive 2 % of its half round trip.
            let _ = if local.is_ipv4() {
                rustix::net::sockopt::set_ip_recvtos(&socket, true)
            } else {
                rustix::net::sockopt::set_ipv6_recvtclass(&socket, true)
            };
        }
        Ok(UdpPort {
            socket,
            group,
            local,
            stats: PortStats::default(),
            capture: None,
            gso,
            gro,
            ids: icrc_id::IdVerifier::default(),
            sports: SourcePorts::new(local.ip()),
            runs: Vec::with_capacity(crate::batch::BATCH),
            loopback_icrc: false,
        })
    }

    /// Whether packets from a loopback address (127.0.0.0/8, ::1) have their ICRC checked:
    /// not by default, as the kernel checks no checksum on `lo`. Nothing crosses a wire
    /// there, and the ICRC guards against a link's corruption, not against a sender (one
    /// on this host can compute it); every packet is still sealed on send, and packets
    /// from any other address (veth and namespaces included: the stand-ins for real
    /// links) are checked. A capture checks them all (it needs what the check solves).
    pub fn check_loopback_icrc(&mut self, on: bool) {
        self.loopback_icrc = on;
    }

    /// The socket, for waiting on it alongside other file descriptors.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.socket.as_fd()
    }

    /// Starts writing every packet this port sends and receives to the pcap file at `path`
    /// (raw IP frames with the IP and UDP headers the packets had on the wire).
    pub fn capture_to(&mut self, path: &std::path::Path) -> io::Result<()> {
        self.capture = Some(crate::capture::Capture::create(path)?);
        Ok(())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The GID of this port: its IP address.
    pub fn gid(&self) -> Gid {
        Gid::from(self.local.ip())
    }

    /// Whether runs of packets go as one GSO message.
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Whether received messages may hold runs of packets (UDP GRO): receive them into an
    /// [`RxBatch`] with room for that.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Turns GSO off (or back on, where the kernel offers it).
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on && gso_offered(&self.socket);
    }

    /// Fills in the ICRC of `packet` (BTH through ICRC) and sends it to `dest`:4791.
    pub fn send(&mut self, dest: Gid, packet: &mut [u8]) -> io::Result<()> {
        self.send_to(SocketAddr::new(dest.ip(), ROCE_V2_PORT), packet)
    }

    /// Fills in the ICRC of a packet about to go to `dst` alone (and captures it).
    pub fn seal(&mut self, dst: SocketAddr, packet: &mut [u8]) -> io::Result<()> {
        let (h, n) = self.seal_as(&mut None, self.local.port(), dst, packet, 0, false)?;
        if let Some(c) = &mut self.capture {
            c.write(&h[..n], packet, true);
        }
        Ok(())
    }

    /// Fills in the ICRC of a packet that leaves from UDP port `sport` with IPv4
    /// Identification `id` (the ICRC covers the UDP header's source port); returns the
    /// headers it was sealed with. `last`: see [`headers_cached`]. `part`: the ICRC field
    /// holds the transport bytes' part, to be completed rather than hashed again.
    fn seal_as(
        &self,
        last: &mut LastHeaders<(u16, SocketAddr, usize)>,
        sport: u16,
        dst: SocketAddr,
        packet: &mut [u8],
        id: u16,
        part: bool,
    ) -> io::Result<([u8; 48], usize)> {
        let len = packet.len();
        let src = || SocketAddr::new(self.local.ip(), sport);
        let (h, n) = headers_cached(last, (sport, dst, len), || headers(src(), dst, len, 0))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "IPv4/IPv6 mismatch"))?;
        if *n == 28 {
            // IPv4: each packet its own Identification.
            h[4..6].copy_from_slice(&id.to_be_bytes());
        }
        let h_ip = &h[..*n];
        let sealed = if part {
            debug_assert_eq!(
                icrc_part::transport_part(&packet[..packet.len() - icrc::ICRC_LEN]),
                icrc::carried(packet).unwrap_or(0),
                "the engine left a stale transport part"
            );
            icrc_part::complete(h_ip, packet)
        } else {
            icrc::fill(h_ip, packet)
        };
        sealed.map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok((*h, *n))
    }

    /// Seals and sends every packet of `batch`, runs to one peer as single GSO messages,
    /// in as few system calls as the kernel allows, each packet from the source port its
    /// QP's port picks in the pool (`sport.rs`; packets are grouped by socket, each QP's
    /// in their order). A full socket buffer drops the rest (lost packets, which the
    /// transport recovers).
    pub fn send_batch(&mut self, batch: &mut TxBatch) -> io::Result<()> {
        // On the stack: this runs for every message a ping-pong sends.
        let n = batch.count;
        let mut from = [0u16; BATCH];
        for (f, &src) in from.iter_mut().zip(&batch.src[..n]) {
            *f = self.source_port(src);
        }
        let from = &from[..n];
        // Only the first `n` entries are written: a ping-pong sends one packet per call.
        let mut order = [0usize; BATCH];
        let order = &mut order[..n];
        for (p, o) in order.iter_mut().enumerate() {
            *o = p;
        }
        // A stable sort: the packets of one QP (one socket) keep their order.
        if from.windows(2).any(|w| w[0] != w[1]) {
            order.sort_by_key(|&i| from[i]);
        }
        let order = &*order;
        let (mut lens, mut flows) = ([0usize; BATCH], [None; BATCH]);
        for (p, &i) in order.iter().enumerate() {
            lens[p] = batch.len[i];
            flows[p] = Some((batch.dest[i], from[i]));
        }
        let (lens, flows) = (&lens[..n], &flows[..n]);
        // The runs' room is kept from batch to batch (an allocation per send otherwise).
        let mut runs = std::mem::take(&mut self.runs);
        gso::runs_into(&mut runs, lens, flows, 0, self.gso);
        let mut at = 0;
        while at < runs.len() {
            // The runs that leave from one port go in one system call, sealed just before
            // it (a connected socket's IDs depend on what it sent before).
            let sport = from[order[runs[at].start]];
            let end = at
                + runs[at..]
                    .iter()
                    .take_while(|r| from[order[r.start]] == sport)
                    .count();
            let dest = batch.dest[order[runs[at].start]].expect("pushed slots have a destination");
            let Some((peer, ids)) = self.source_ready(sport, dest) else {
                // Given up: these packets are lost (the transport recovers them).
                at = end;
                continue;
            };
            self.seal_group(batch, order, from, &runs[at..end], ids)?;
            let sent = batch.send(self.socket_from(sport), order, &runs[at..end], peer);
            match sent {
                Ok(n) => {
                    let n = n.max(1);
                    let segs: usize = runs[at..at + n].iter().map(|r| r.len()).sum();
                    self.stats.tx += segs as u64;
                    self.stats.tx_messages += n as u64;
                    self.stats.tx_calls += 1;
                    let segs = Before { msgs: n, segs };
                    self.capture_sent(batch, order, from, &runs[at..at + n], ids);
                    if let Some(s) = self.sports.get_mut(sport) {
                        s.ids = s.ids.advance(segs);
                    }
                    at += n;
                }
                // A full send buffer: refused before an ID was taken.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Other errors may come after the kernel numbered the message: a
                    // connected socket probes its counter again before its next send.
                    if let Some(s) = self.sports.get_mut(sport) {
                        s.lost_count = true;
                    }
                    if is_icmp_error(&e) {
                        // The message at `at` drew an ICMP error from an earlier send: skip it.
                        self.stats.icmp_errors += 1;
                        at += 1;
                    } else if self.gso && runs[at].len() > 1 && gso_refused(&e) {
                        // The route cannot segment (no checksum offload on its device): send
                        // the rest one packet per message from now on.
                        self.gso = false;
                        let start = runs[at].start;
                        gso::runs_into(&mut runs, lens, flows, start, false);
                        at = 0;
                    } else {
                        let lost: usize = runs[at..end].iter().map(|r| r.len()).sum();
                        self.stats.tx_errors += lost as u64;
                        return Err(e);
                    }
                }
            }
        }
        batch.clear();
        self.runs = runs;
        Ok(())
    }

    /// The UDP source port a packet whose QP asks for `want` leaves from: its pool
    /// socket's, or this port's own (0 asks for that, as does a pool socket that could
    /// not be bound).
    fn source_port(&mut self, want: u16) -> u16 {
        let own = self.local.port();
        if want == 0 {
            return own;
        }
        let port = self.sports.port_for(want, ready_to_send);
        self.stats.source_ports_refused = self.sports.refused;
        port.unwrap_or(own)
    }

    /// The socket bound to `sport` (one `source_port` returned).
    fn socket_from(&self, sport: u16) -> &UdpSocket {
        self.sports.get(sport).map_or(&self.socket, |s| &s.socket)
    }

    /// The socket that port `sport` sends from, ready for a message to `dest`: where it is
    /// connected, and how the kernel will number its packets. A pool socket is connected
    /// on its first send; None: its IDs cannot be known, and it is given up.
    fn source_ready(&mut self, sport: u16, dest: SocketAddr) -> Option<(Option<SocketAddr>, Ids)> {
        let Some(s) = self.sports.get_mut(sport) else {
            return Some((None, Ids::PerMessage)); // the device's own socket
        };
        let ready = if s.connect_once(dest) { s.ids() } else { None };
        match ready {
            Some(ids) => Some((s.peer, ids)),
            None => {
                self.sports.give_up(sport);
                self.stats.source_ports_refused = self.sports.refused;
                None
            }
        }
    }

    /// Seals every packet of `runs` (positions in `order`; one system call's), each with
    /// its source port and the IPv4 ID the kernel will give it.
    fn seal_group(
        &mut self,
        batch: &mut TxBatch,
        order: &[usize],
        from: &[u16],
        runs: &[Range<usize>],
        ids: Ids,
    ) -> io::Result<()> {
        // The packets of a run share their headers but for the IPv4 ID.
        let mut last = None;
        for (i, id) in numbered(order, runs, ids) {
            let dst = batch.dest[i].expect("pushed slots have a destination");
            let part = batch.part[i];
            self.seal_as(&mut last, from[i], dst, batch.to_seal(i), id, part)?;
        }
        Ok(())
    }

    /// Writes the packets of `runs` (sent, sealed with `ids`) to the capture, if one runs.
    fn capture_sent(
        &mut self,
        batch: &mut TxBatch,
        order: &[usize],
        from: &[u16],
        runs: &[Range<usize>],
        ids: Ids,
    ) {
        let Some(c) = &mut self.capture else {
            return;
        };
        for (i, id) in numbered(order, runs, ids) {
            let dst = batch.dest[i].expect("pushed slots have a destination");
            let src = SocketAddr::new(self.local.ip(), from[i]);
            let packet = batch.packet_mut(i);
            if let Some((h, n)) = headers(src, dst, packet.len(), id) {
                c.write(&h[..n], packet, true);
            }
        }
    }

    /// Receives waiting datagrams (one system call); returns how many arrived. Those whose
    /// ICRC fails are counted and left with no source (`batch.from[i] == None`).
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        let n = loop {
            match batch.recv(&self.socket) {
                Ok(n) => break n,
                Err(e) if is_icmp_error(&e) => self.stats.icmp_errors += 1,
                Err(e) => return Err(e),
            }
        };
        if n > 0 {
            self.stats.rx_calls += 1;
            self.stats.rx_messages += batch.messages() as u64;
            if let Some(dropped) = batch.overflow {
                self.stats.rx_overflow = self.stats.rx_overflow.max(u64::from(dropped));
            }
        }
        // The IP and UDP headers of the last packet checked: a GRO message's segments
        // share them (all but the last have one length).
        let mut last = None;
        for i in 0..n {
            self.stats.rx += 1;
            let Some(from) = batch.from(i) else {
                self.stats.rx_bad_source += 1;
                continue;
            };
            if !self.check(from, batch.datagram(i), &mut last) {
                batch.refuse(i);
                self.stats.rx_bad_icrc += 1;
            }
        }
        Ok(n)
    }

    /// Verifies a received packet's ICRC (and captures it if it passes). `last`: the
    /// headers of the packet checked before (`headers_cached`).
    fn check(
        &mut self,
        from: SocketAddr,
        data: &[u8],
        last: &mut LastHeaders<(SocketAddr, usize)>,
    ) -> bool {
        if !self.loopback_icrc && self.capture.is_none() && from.ip().is_loopback() {
            self.stats.icrc_unchecked_loopback += 1;
            return true;
        }
        let build = || headers(from, self.local, data.len(), 0);
        let Some((h, n)) = headers_cached(last, (from, data.len()), build) else {
            return false;
        };
        let n = *n;
        let (verified, id) = if n == 28 {
            // The ID the sender's kernel gave it, solved (the headers hold ID 0).
            let id = self.ids.verify(&h[..28], data);
            (id.is_ok(), id.unwrap_or(0))
        } else {
            (icrc::verify(&h[..n], data).is_ok(), 0)
        };
        if let (true, Some(c)) = (verified, &mut self.capture) {
            // As it was on the wire; the headers kept for the next packet keep ID 0.
            let mut wire = *h;
            if n == 28 {
                wire[4..6].copy_from_slice(&id.to_be_bytes());
            }
            c.write(&wire[..n], data, false);
        }
        verified
    }

    /// [`Self::send`] to an explicit socket address.
    pub fn send_to(&mut self, dst: SocketAddr, packet: &mut [u8]) -> io::Result<()> {
        self.seal(dst, packet)?;
        match self.socket.send_to(packet, dst) {
            Ok(_) => {}
            Err(e) if is_icmp_error(&e) => self.stats.icmp_errors += 1,
            Err(e) => return Err(e),
        }
        self.stats.tx += 1;
        Ok(())
    }

    /// Receives one datagram whose ICRC verifies, if one is waiting. Datagrams that fail
    /// are counted and skipped.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<(Gid, usize)>> {
        loop {
            let (len, from) = match self.socket.recv_from(buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // ICMP errors about an earlier send (a peer that went away): that packet is
                // lost, and the transport's retries decide what it means.
                Err(e) if is_icmp_error(&e) => {
                    self.stats.icmp_errors += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.stats.rx += 1;
            if self.check(from, &buf[..len], &mut None) {
                return Ok(Some((Gid::from(from.ip()), len)));
            }
            self.stats.rx_bad_icrc += 1;
        }
    }

    /// Waits until a datagram may be readable or `timeout` passes.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
        // Too long to represent: wait without a limit.
        let ts = Timespec::try_from(timeout).ok();
        poll(&mut fds, ts.as_ref()).map_err(io::Error::from)?;
        Ok(())
    }
}

/// The slot and IPv4 ID of every packet of `runs` (positions in `order`), the messages of
/// one system call in order, each run one message.
fn numbered<'a>(
    order: &'a [usize],
    runs: &'a [Range<usize>],
    ids: Ids,
) -> impl Iterator<Item = (usize, u16)> + 'a {
    let mut before = Before::default();
    runs.iter().flat_map(move |r| {
        let at = before;
        (before.msgs, before.segs) = (before.msgs + 1, before.segs + r.len());
        r.clone()
            .enumerate()
            .map(move |(k, p)| (order[p], ids.of(at, r.len(), k)))
    })
}

/// The headers [`headers`] built last (with IPv4 Identification 0), and what they were
/// built for (`K`: what tells one packet's apart from another's).
type LastHeaders<K> = Option<(K, Option<([u8; 48], usize)>)>;

/// The headers of a packet whose `key` is `key`, built by `build` only when it differs
/// from `last`'s: the packets of a GSO or GRO run share them. Borrowed, not copied: the
/// caller may set the ID in place.
fn headers_cached<K: PartialEq>(
    last: &mut LastHeaders<K>,
    key: K,
    build: impl FnOnce() -> Option<([u8; 48], usize)>,
) -> Option<&mut ([u8; 48], usize)> {
    if !matches!(last, Some((k, _)) if *k == key) {
        *last = Some((key, build()));
    }
    last.as_mut()?.1.as_mut()
}

/// The IP and UDP headers the kernel puts in front of `len` bytes from `src` to `dst`,
/// with IPv4 Identification `id`.
pub(crate) fn headers(
    src: SocketAddr,
    dst: SocketAddr,
    len: usize,
    id: u16,
) -> Option<([u8; 48], usize)> {
    let mut h = [0u8; 48];
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h[..28].copy_from_slice(&icrc::ipv4_udp_header(
                s.octets(),
                d.octets(),
                id,
                src.port(),
                dst.port(),
                len,
            ));
            Some((h, 28))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            h.copy_from_slice(&icrc::ipv6_udp_header(
                s.octets(),
                d.octets(),
                src.port(),
                dst.port(),
                len,
            ));
            Some((h, 48))
        }
        _ => None,
    }
}
