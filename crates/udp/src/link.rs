//! The link between an engine and the network: a UDP port on the wall clock, and the loop
//! a NIC runs (send what the engine has, hand it what arrived, fire its timers). The
//! engine is the caller's (the API crate owns it); every call that drives one takes it.

use crate::batch::{RxBatch, TxBatch, BATCH};
use crate::host_slot::HostSlot;
use crate::interfaces::{is_link_local, Interface};
use crate::kernel::{KernelCounters, KernelUdpDrops};
use crate::port::{BindError, PortStats, UdpPort};
use crate::RxDropReport;
use oxrdma_core::{DeviceAttr, Engine, EngineConfig, Gid, Mtu, Nanos, Transmit};
use oxrdma_wire::ROCE_V2_PORT;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Link {
    /// The device's GID table (its addresses), by index.
    gids: Vec<Gid>,
    /// A port per GID that has one, with its GID's index; the first is the device's
    /// primary (its statistics, captures and drop reports).
    ports: Vec<(u8, UdpPort)>,
    /// Which port packets to each destination leave from, once found (several ports).
    routes: HashMap<Gid, usize>,
    /// Several ports (or a device on an interface): one epoll set over their sockets, for
    /// a sleeping thread to watch.
    waiter: Option<OwnedFd>,
    /// The GIDs that had no port when last tried (an address still tentative: IPv6
    /// duplicate address detection), and when that was.
    missing: Vec<(u8, Instant)>,
    /// The device's slot on the host, for ports opened later (None: ports of its own).
    host: Option<Arc<HostSlot>>,
    /// Packets not sent because their GID's address has no port (yet).
    pub tx_no_source: u64,
    /// The index of the network interface holding the address (0 if none is found).
    pub ifindex: u32,
    start: Instant,
    tx: TxBatch,
    /// Several ports: the packets of a batch that leave from another port than the first's.
    tx_other: TxBatch,
    /// What the engine wrote into `tx`'s free slots on the last call, in slot order.
    sent: Vec<Transmit>,
    rx: RxBatch,
    /// Whether packets that arrived together go to the engine together (its run path);
    /// `OXRDMA_RUNS=0` hands them over one by one.
    runs: bool,
    /// The kernel's UDP counters of the device's namespace, and their values at open.
    kernel: KernelCounters,
    kernel_at_open: KernelUdpDrops,
}

impl Link {
    /// Opens the link for `ip` (port 4791), shared with this user's other processes on
    /// the address unless `alone` (`UdpPort::bind`, `bind_alone`).
    pub fn open(ip: IpAddr, alone: bool) -> Result<Link, BindError> {
        let port = if alone {
            UdpPort::bind_alone(ip)?
        } else {
            UdpPort::bind(ip)?
        };
        let ifindex = crate::mtu::interface_index(ip).unwrap_or(0);
        Self::with_ports(vec![Gid::from(ip)], vec![(0, port)], ifindex)
    }

    /// Opens the link of a device on network interface `iface`: its GID table in rxe's
    /// order (`interfaces.rs`), a port for each address, all in one slot of the host
    /// (`host_slot.rs`; each port alone with `OXRDMA_SHARE=0`). A GID whose address
    /// cannot be bound yet (IPv6 duplicate address detection not done) has no port: it is
    /// tried again when a packet is to leave from it (at most every 100 ms), and until
    /// then such packets are lost, never sent from another address (the peer would drop
    /// them as from a stranger).
    pub fn open_interface(iface: &Interface) -> Result<Link, BindError> {
        let gids = iface.gid_table();
        let first = SocketAddr::new(
            gids.first().map_or(IpAddr::from([0u8; 4]), |g| g.ip()),
            ROCE_V2_PORT,
        );
        let share = crate::port::share_wanted();
        let host = if share {
            let h = HostSlot::claim().map_err(|source| BindError::Io {
                addr: first,
                source,
            })?;
            Some(Arc::new(h))
        } else {
            None
        };
        let mut ports = Vec::new();
        let mut refused = None;
        let mut missing = Vec::new();
        for (i, g) in gids.iter().enumerate() {
            match bind_gid(*g, iface.index, host.as_ref()) {
                Ok(p) => ports.push((i as u8, p)),
                Err(BindError::NotLocal { .. }) => missing.push((i as u8, Instant::now())),
                Err(e) => refused = refused.or(Some(e)),
            }
        }
        if let Some(e) = refused {
            return Err(e);
        }
        if ports.is_empty() {
            return Err(BindError::NotLocal { addr: first });
        }
        let mut link = Self::with_ports(gids, ports, iface.index)?;
        if link.waiter.is_none() {
            let addr = link.port().local_addr();
            let w = epoll_over(&link.ports).map_err(|source| BindError::Io { addr, source })?;
            link.waiter = Some(w);
        }
        (link.missing, link.host) = (missing, host);
        Ok(link)
    }

    /// Tries again to open the port of GID `g`, which had none (at most every 100 ms);
    /// its place in `ports` if it opened.
    fn open_missing(&mut self, g: u8) -> Option<usize> {
        let at = self.missing.iter().position(|(m, _)| *m == g)?;
        if self.missing[at].1.elapsed() < Duration::from_millis(100) {
            return None;
        }
        self.missing[at].1 = Instant::now();
        let gid = self.gids[usize::from(g)];
        let port = bind_gid(gid, self.ifindex, self.host.as_ref()).ok()?;
        if let Some(w) = &self.waiter {
            let data = rustix::event::epoll::EventData::new_u64(self.ports.len() as u64);
            let flags = rustix::event::epoll::EventFlags::IN;
            rustix::event::epoll::add(w, port.as_fd(), data, flags).ok()?;
        }
        self.missing.remove(at);
        self.ports.push((g, port));
        self.routes.clear();
        Some(self.ports.len() - 1)
    }

    fn with_ports(
        gids: Vec<Gid>,
        ports: Vec<(u8, UdpPort)>,
        ifindex: u32,
    ) -> Result<Link, BindError> {
        let port_gro = ports.iter().any(|(_, p)| p.gro());
        let waiter = if ports.len() > 1 {
            let addr = ports[0].1.local_addr();
            Some(epoll_over(&ports).map_err(|source| BindError::Io { addr, source })?)
        } else {
            None
        };
        let kernel = KernelCounters::open();
        Ok(Link {
            gids,
            ports,
            routes: HashMap::new(),
            waiter,
            missing: Vec::new(),
            host: None,
            tx_no_source: 0,
            ifindex,
            start: Instant::now(),
            tx: TxBatch::default(),
            tx_other: TxBatch::default(),
            sent: Vec::with_capacity(BATCH),
            rx: RxBatch::new(port_gro),
            runs: std::env::var("OXRDMA_RUNS").map_or(true, |v| v != "0"),
            kernel_at_open: kernel.read(),
            kernel,
        })
    }

    /// The device's primary port (its first address with a port).
    pub fn port(&self) -> &UdpPort {
        &self.ports[0].1
    }

    /// The primary port, mutable.
    pub fn port_mut(&mut self) -> &mut UdpPort {
        &mut self.ports[0].1
    }

    /// Every port, with the index of its GID.
    pub fn ports(&self) -> impl Iterator<Item = (u8, &UdpPort)> {
        self.ports.iter().map(|(i, p)| (*i, p))
    }

    /// The device's GID table.
    pub fn gids(&self) -> &[Gid] {
        &self.gids
    }

    /// What a thread waits on for packets: the port's socket, or with several ports an
    /// epoll set over theirs (readable when any is).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.waiter {
            Some(w) => w.as_fd(),
            None => self.ports[0].1.as_fd(),
        }
    }

    /// Steers the connection requests for `service_id` to this process on every address
    /// of the device while the guards live (none where the addresses are this process's
    /// alone).
    pub fn listen(&self, service_id: u64) -> io::Result<Vec<crate::group::Listening>> {
        let mut guards = Vec::new();
        for (_, p) in &self.ports {
            guards.extend(p.listen(service_id)?);
        }
        Ok(guards)
    }

    /// What an engine behind this link is: its GID table (the addresses), the largest MTU
    /// the interface carries (packets that would not fit cannot be sent with DF set), and
    /// whether it speaks selective repeat.
    pub fn engine_config(&self) -> EngineConfig {
        // Asked by an address that binds without a scope (a link-local one does not).
        let if_mtu = self
            .ports
            .iter()
            .find_map(|(_, p)| crate::mtu::interface_mtu(p.local_addr().ip()));
        EngineConfig {
            gids: self.gids.clone(),
            max_mtu: if_mtu.map_or(Mtu::Mtu4096, crate::mtu::active_mtu),
            attr: DeviceAttr::default(),
            selective_repeat: selective_repeat_enabled(),
            slot: self.port().slot(),
            peer_limits: Default::default(),
        }
    }

    /// Every receive drop so far, by who dropped it (this link, or `engine`) and why.
    pub fn rx_drops(&self, engine: &Engine) -> RxDropReport {
        RxDropReport {
            received: self.stats().rx,
            port: self.stats(),
            engine: engine.stats().rx_drops,
            kernel: self.kernel.read().since(&self.kernel_at_open),
        }
    }

    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Sends what the engine has, takes in what arrived, fires due timers. Returns how many
    /// packets moved.
    pub fn poll(&mut self, engine: &mut Engine) -> io::Result<usize> {
        let mut moved = 0;
        loop {
            let mut now = self.now();
            let sent = self.transmit_at(engine, now)?;
            moved += sent;
            let mut progressed = sent > 0;
            let mut received = false;
            for (gid, port) in &mut self.ports {
                let local = self.gids[usize::from(*gid)];
                while port.recv_batch(&mut self.rx)? > 0 {
                    now = self.start.elapsed().as_nanos() as Nanos;
                    let rx = &self.rx;
                    for (src, ce, run) in rx.runs(self.runs) {
                        let packets = run.map(|i| rx.datagram(i));
                        engine.handle_packets_to(now, Gid::from(src.ip()), local, ce, packets);
                    }
                    moved += self.rx.count;
                    progressed = true;
                    received = true;
                    if self.rx.drained() {
                        break;
                    }
                }
            }
            // The clock as last read (when packets arrived, the read that stamped them; else
            // the one before this round's sends): a timer found due a few microseconds late
            // is served by the next round, never early.
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now);
                progressed = true;
            }
            // Back to the caller once something arrived: it may be waiting for exactly this
            // (a completion, a byte in memory), and the ACKs can go out on the next call.
            if !progressed || received {
                return Ok(moved);
            }
        }
    }

    /// Sends what the engine has (what a post added), and nothing else: the receive a
    /// [`Self::poll`] would try comes with the poller's next call. Returns how many packets
    /// went.
    pub fn transmit(&mut self, engine: &mut Engine) -> io::Result<usize> {
        let now = self.now();
        self.transmit_at(engine, now)
    }

    fn transmit_at(&mut self, engine: &mut Engine, now: Nanos) -> io::Result<usize> {
        let mut moved = 0;
        loop {
            // Into every free slot at once: a QP's burst is built in one call.
            let sent = &mut self.sent;
            sent.clear();
            engine.poll_transmit_many(now, self.tx.free_slots(), |t| sent.push(t));
            // A burst's packets go to one peer: its address is made once.
            let mut to: Option<(Gid, SocketAddr)> = None;
            for t in &self.sent {
                let dest = match to {
                    Some((gid, addr)) if gid == t.dest => addr,
                    _ => {
                        let addr = scoped(t.dest.ip(), ROCE_V2_PORT, self.ifindex);
                        to = Some((t.dest, addr));
                        addr
                    }
                };
                self.tx.push_engine(dest, t.src_port, t.len);
            }
            let n = self.tx.count;
            if n == 0 {
                return Ok(moved);
            }
            let sent = if self.ports.len() == 1 && self.missing.is_empty() {
                self.ports[0].1.send_batch(&mut self.tx)
            } else {
                self.send_by_port()
            };
            if let Err(e) = sent {
                // What the failed call did not send is lost (the transport recovers it);
                // the next batch starts empty.
                self.tx.clear();
                if std::env::var_os("OXRDMA_DEBUG_SEND").is_some() {
                    eprintln!("oxrdma: send failed: {e} ({:?})", self.sent.first());
                }
                return Err(e);
            }
            moved += n;
        }
    }

    /// Sends the batch in `tx` from several ports: each packet from the port of its GID
    /// (or the destination's, `port_for`), a port's packets in one batch of their own
    /// unless they all leave from one. A packet no port can send (a family the device has
    /// no address of) is lost, as on a wire; the transport's retries decide what it means.
    fn send_by_port(&mut self) -> io::Result<()> {
        let picks: Vec<Option<usize>> = (0..self.tx.count)
            .map(|i| self.port_for(self.sent[i]))
            .collect();
        if let Some(&Some(p)) = picks.first() {
            if picks.iter().all(|&q| q == Some(p)) {
                return self.ports[p].1.send_batch(&mut self.tx);
            }
        }
        for p in 0..self.ports.len() {
            self.tx_other.clear();
            for (i, _) in picks.iter().enumerate().filter(|(_, &q)| q == Some(p)) {
                let len = self.tx.len[i];
                self.tx_other.next_slot()[..len].copy_from_slice(self.tx.packet_mut(i));
                let dest = self.tx.dest[i]
                    .unwrap_or_else(|| scoped(self.sent[i].dest.ip(), ROCE_V2_PORT, 0));
                self.tx_other.push_engine(dest, self.tx.src[i], len);
            }
            if self.tx_other.count > 0 {
                self.ports[p].1.send_batch(&mut self.tx_other)?;
            }
        }
        self.tx.clear();
        Ok(())
    }

    /// The port `t` leaves from: its GID's, if that has a port of the destination's
    /// family; else the one of the address the host's routing picks for the destination
    /// among the device's (found once per destination); else the first of the family.
    fn port_for(&mut self, t: Transmit) -> Option<usize> {
        let v4 = t.dest.ip().is_ipv4();
        let family = |p: &UdpPort| p.local_addr().is_ipv4() == v4;
        if let Some(g) = t.sgid {
            if let Some(at) = self.ports.iter().position(|(i, p)| *i == g && family(p)) {
                return Some(at);
            }
            if self.missing.iter().any(|(m, _)| *m == g) {
                let opened = self.open_missing(g);
                self.tx_no_source += u64::from(opened.is_none());
                return opened;
            }
        }
        if let Some(&at) = self.routes.get(&t.dest) {
            return Some(at);
        }
        let dest = t.dest.ip();
        let ports = &self.ports;
        let by_scope = ports.iter().position(|(_, p)| {
            family(p) && is_link_local(p.local_addr().ip()) == is_link_local(dest)
        });
        let routed = route_source(dest)
            .and_then(|src| ports.iter().position(|(_, p)| p.local_addr().ip() == src));
        let at = routed
            .or(by_scope)
            .or_else(|| ports.iter().position(|(_, p)| family(p)))?;
        self.routes.insert(t.dest, at);
        Some(at)
    }

    /// Every port's counters, added up.
    pub fn stats(&self) -> PortStats {
        let mut sum = PortStats::default();
        for (_, p) in &self.ports {
            sum += p.stats;
        }
        sum
    }

    /// How long until `engine`'s next timer is due (None: no timer armed).
    pub fn next_timer_in(&self, engine: &Engine) -> Option<Duration> {
        let now = self.now();
        engine
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Blocks until a packet may have arrived or the next timer is due (at most `max`).
    pub fn wait(&self, engine: &Engine, max: Duration) -> io::Result<()> {
        let now = self.now();
        let until_timer = engine
            .poll_timeout()
            .map_or(max, |t| Duration::from_nanos(t.saturating_sub(now)));
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let fd = self.as_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = Timespec::try_from(until_timer.min(max)).ok();
        poll(&mut fds, ts.as_ref()).map_err(io::Error::from)?;
        Ok(())
    }
}

/// Whether the device speaks selective repeat with peers that do: yes, unless
/// `OXRDMA_SELECTIVE_REPEAT=0` (to measure go-back-N, as rxe does it, between oxrdma peers).
fn selective_repeat_enabled() -> bool {
    std::env::var("OXRDMA_SELECTIVE_REPEAT").map_or(true, |v| v != "0")
}

impl Drop for Link {
    /// With `OXRDMA_BATCHES=1`, says how well this device batched what it moved
    /// (`PortStats::batching`): a stream whose messages go as runs of 60 packets and of 4
    /// costs both ends nearly twice what full runs would.
    fn drop(&mut self) {
        if std::env::var("OXRDMA_BATCHES").is_ok_and(|v| v == "1") {
            eprintln!(
                "oxrdma {}: {}",
                self.port().local_addr().ip(),
                self.stats().batching()
            );
        }
    }
}

/// `ip`:`port` as a socket address, with interface `ifindex` as its scope if `ip` is an
/// IPv6 link-local address (which means nothing without one).
pub fn scoped(ip: IpAddr, port: u16, ifindex: u32) -> SocketAddr {
    match ip {
        IpAddr::V6(v6) if is_link_local(ip) => SocketAddrV6::new(v6, port, 0, ifindex).into(),
        _ => SocketAddr::new(ip, port),
    }
}

/// The source address the host's routing picks for `dst`, if it has a route (a UDP
/// socket connected to it: no packet is sent).
pub fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any = match dst {
        IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        IpAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(dst, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// The port of GID `g` on interface `ifindex`: in the device's slot `host`, or alone.
fn bind_gid(g: Gid, ifindex: u32, host: Option<&Arc<HostSlot>>) -> Result<UdpPort, BindError> {
    let addr = scoped(g.ip(), ROCE_V2_PORT, ifindex);
    match host {
        Some(h) => UdpPort::bind_shared(addr, h),
        None => UdpPort::bind_addr(addr),
    }
}

/// An epoll set over the sockets of `ports`: readable while any of them is.
fn epoll_over(ports: &[(u8, UdpPort)]) -> io::Result<OwnedFd> {
    use rustix::event::epoll;
    let set = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    for (i, (_, p)) in ports.iter().enumerate() {
        epoll::add(
            &set,
            p.as_fd(),
            epoll::EventData::new_u64(i as u64),
            epoll::EventFlags::IN,
        )?;
    }
    Ok(set)
}
