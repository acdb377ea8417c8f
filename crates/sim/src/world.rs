//! Engines joined by the simulated network, on one virtual clock.

use crate::net::{Datagram, NetConfig, Network};
use oxrdma_core::{DeviceAttr, Engine, EngineConfig, Gid, Mtu, Nanos, Transmit, MAX_PACKET};
use oxrdma_wire::{icrc, icrc_part, Headers, Opcode, ROCE_V2_PORT};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;

/// One simulated host.
#[derive(Debug)]
pub struct Node {
    pub engine: Engine,
    pub ip: Ipv4Addr,
    /// Set when the NIC stopped taking packets because its queue was full: when to resume.
    tx_wakeup: Option<Nanos>,
}

/// Most a NIC queues for its port before it stops pulling packets from the engine (like a
/// finite transmit ring). Packets not pulled stay in the engine, where go-back-N can still
/// cancel them.
pub const TX_QUEUE: Nanos = 20_000;

/// Counters of what the world dropped before the engines saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorldStats {
    pub bad_icrc: u64,
    pub no_such_host: u64,
    /// A digest of every packet the engines sent (source, destination, bytes): two runs
    /// that differ in any packet differ here.
    pub sent_digest: u64,
    /// Packets the engines' run path took (`Stats::rx_run`), summed.
    pub rx_run: u64,
    /// Packets the engines' send run path built (`Stats::tx_run`), summed.
    pub tx_run: u64,
}

/// What a tap does with a packet about to enter the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapAction {
    Pass,
    Drop,
    /// Send it twice.
    Duplicate,
    /// Hold it back this long (ns): later packets overtake it.
    Delay(Nanos),
}

/// A test's hook on every packet an engine sends (after the ICRC is filled in).
pub struct Tap(pub Box<dyn FnMut(&Datagram) -> TapAction>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

#[derive(Debug)]
pub struct World {
    pub nodes: Vec<Node>,
    pub now: Nanos,
    pub net: Network,
    pub stats: WorldStats,
    /// Print every delivered packet (set by `OXRDMA_SIM_TRACE`).
    pub trace: bool,
    /// Sees, and may drop or duplicate, every packet sent.
    pub tap: Option<Tap>,
    /// Hands each packet to its engine on its own (the reference for the run path, which
    /// packets that arrive together take otherwise: see `NetConfig::rx_every`).
    pub per_packet: bool,
    /// Packets an engine may write per `poll_transmit_many` call, as a driver's batch
    /// (1: one `poll_transmit` at a time). With more, a message's middle packets are built
    /// in runs unless the engine's send runs are off (`Engine::set_send_runs`).
    pub tx_slots: usize,
    buf: Vec<u8>,
}

/// Where a packet's virtual address lies (its RETH's or AtomicETH's; empty if it has
/// none): where a buffer lies in this process, which differs from run to run, so runs are
/// compared without it.
pub fn address_bytes(data: &[u8]) -> std::ops::Range<usize> {
    let addressed = |h: Headers| h.contains(Headers::RETH) || h.contains(Headers::ATOMIC_ETH);
    match data.first().map(|&op| Opcode(op).info()) {
        Some(Ok(info)) if addressed(info.headers) && data.len() >= 20 => 12..20,
        _ => 0..0,
    }
}

/// `so_far` and one more packet sent from node `from` to `to`, its address left out
/// ([`address_bytes`]), and so its ICRC field (a long packet's transport part covers it).
fn digest(so_far: u64, from: usize, to: usize, data: &[u8]) -> u64 {
    let va = address_bytes(data);
    let end = data.len().saturating_sub(icrc::ICRC_LEN).max(va.end);
    let mut h = std::hash::DefaultHasher::new();
    (so_far, from, to, &data[..va.start], &data[va.end..end]).hash(&mut h);
    h.finish()
}

/// The IP and UDP headers the ICRC covers, as a kernel would send them (IPv4 ID 0).
fn ip_udp(from: Ipv4Addr, to: Ipv4Addr, sport: u16, len: usize) -> [u8; 28] {
    icrc::ipv4_udp_header(from.octets(), to.octets(), 0, sport, ROCE_V2_PORT, len)
}

impl World {
    /// `n` hosts at 10.0.0.1, 10.0.0.2, …; everything random derives from `seed`.
    pub fn new(n: usize, net: NetConfig, seed: u64) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let nodes = (0..n)
            .map(|i| {
                let ip = Ipv4Addr::new(10, 0, 0, i as u8 + 1);
                let mut key = [0u8; 32];
                rng.fill_bytes(&mut key);
                let config = EngineConfig {
                    gids: vec![Gid::from(ip)],
                    max_mtu: Mtu::Mtu4096,
                    attr: DeviceAttr::default(),
                    selective_repeat: true,
                    slot: None,
                    peer_limits: Default::default(),
                };
                Node {
                    engine: Engine::new(config, key),
                    ip,
                    tx_wakeup: None,
                }
            })
            .collect();
        let net_rng = ChaCha8Rng::seed_from_u64(rng.next_u64());
        let trace = std::env::var_os("OXRDMA_SIM_TRACE").is_some();
        World {
            nodes,
            now: 0,
            net: Network::new(net, net_rng).traced(trace),
            stats: WorldStats::default(),
            trace,
            tap: None,
            per_packet: false,
            tx_slots: 1,
            buf: vec![0; MAX_PACKET],
        }
    }

    /// `n` hosts as `new` makes them, where the last `shared` of them are processes of one
    /// host sharing its address (the first of them): each engine owns a slot (0, 1, …) under
    /// one key, draws its QPNs and comm IDs there, and the address's packets go to the
    /// engine the kernel's steering rule names (`oxrdma_core::slot::steer`, what
    /// `oxrdma_udp::steer` compiles for the kernel).
    pub fn with_shared(n: usize, shared: usize, net: NetConfig, seed: u64) -> World {
        let mut w = World::new(n, net, seed);
        let first = n - shared;
        let key = (seed as u32).rotate_left(7) | 1;
        for (s, i) in (first..n).enumerate() {
            let ip = w.nodes[first].ip;
            let mut config = w.nodes[i].engine.config().clone();
            config.gids = vec![Gid::from(ip)];
            config.slot = Some(oxrdma_core::Slot::new(s as u32, key));
            let mut seed32 = [0u8; 32];
            seed32[..8].copy_from_slice(&(seed ^ i as u64).to_le_bytes());
            w.nodes[i] = Node {
                engine: Engine::new(config, seed32),
                ip,
                tx_wakeup: None,
            };
        }
        w
    }

    /// Gives node `n` a new engine made with its config as `change` leaves it (before the
    /// node has done anything: what the old engine held is gone).
    pub fn reconfigure(&mut self, n: usize, change: impl FnOnce(&mut EngineConfig)) {
        let mut config = self.nodes[n].engine.config().clone();
        change(&mut config);
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&(n as u64 ^ 0x5eed).to_le_bytes());
        self.nodes[n].engine = Engine::new(config, seed);
    }

    /// The node that takes `data` sent to `gid`: the one at that address, or among the
    /// processes sharing it, the one the steering rule names (its slot; a number of no live
    /// slot goes to the default, the lowest, which drops and counts it).
    fn node_of(&self, gid: Gid, data: &[u8]) -> Option<usize> {
        let at: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| Gid::from(self.nodes[i].ip) == gid)
            .collect();
        let slot_of = |i: usize| self.nodes[i].engine.config().slot;
        let (&first, Some(key)) = (at.first()?, slot_of(at[0]).map(|s| s.key)) else {
            return at.first().copied();
        };
        let live = at
            .iter()
            .filter_map(|&i| slot_of(i))
            .fold(0u64, |m, s| m | 1 << s.index);
        let default = live.trailing_zeros();
        let listeners: Vec<(u64, u32)> = at
            .iter()
            .flat_map(|&i| {
                let s = slot_of(i).map_or(0, |s| s.index);
                self.nodes[i]
                    .engine
                    .cm()
                    .listening()
                    .map(move |sid| (sid, s))
            })
            .collect();
        let to = oxrdma_core::slot::steer(key, data, &listeners, default, live);
        Some(
            at.iter()
                .copied()
                .find(|&i| slot_of(i).is_some_and(|s| s.index == to))
                .unwrap_or(first),
        )
    }

    /// Moves everything the engines want to send onto the network.
    fn transmit(&mut self) {
        let mut sent = Vec::new();
        // `poll_transmit` is this with one slot.
        self.buf.resize(self.tx_slots.max(1) * MAX_PACKET, 0);
        for i in 0..self.nodes.len() {
            self.nodes[i].tx_wakeup = None;
            loop {
                let backlog = self.net.backlog(i, self.now);
                if backlog > TX_QUEUE {
                    self.nodes[i].tx_wakeup = Some(self.now + backlog - TX_QUEUE);
                    break;
                }
                sent.clear();
                self.nodes[i]
                    .engine
                    .poll_transmit_many(self.now, &mut self.buf, |t| sent.push(t));
                if sent.is_empty() {
                    break;
                }
                let mut at = 0;
                for t in &sent {
                    self.put_on_network(i, *t, at);
                    at += t.len;
                }
            }
        }
    }

    /// Puts the packet `t` that node `i` wrote at `at` in `buf` on the network.
    fn put_on_network(&mut self, i: usize, t: Transmit, at: usize) {
        let mut data = self.buf[at..at + t.len].to_vec();
        let Some(to) = self.node_of(t.dest, &data) else {
            self.stats.no_such_host += 1;
            return;
        };
        self.stats.sent_digest = digest(self.stats.sent_digest, i, to, &data);
        let hdr = ip_udp(self.nodes[i].ip, self.nodes[to].ip, t.src_port, data.len());
        // As the UDP driver does: long packets carry their transport part (checked on
        // arrival, so every simulated run tests the engine's parts).
        let sealed = if icrc_part::carries_part(data.len().saturating_sub(icrc::ICRC_LEN)) {
            icrc_part::complete(&hdr, &mut data)
        } else {
            icrc::fill(&hdr, &mut data)
        };
        sealed.expect("engine packets are long enough");
        let d = Datagram {
            from: i,
            to,
            src_port: t.src_port,
            data,
            ce: false,
        };
        let action = self.tap.as_mut().map_or(TapAction::Pass, |t| (t.0)(&d));
        match action {
            TapAction::Pass => self.net.send(self.now, d),
            TapAction::Drop => {}
            TapAction::Delay(hold) => self.net.send_held(self.now, d, hold),
            TapAction::Duplicate => {
                self.net.send(self.now, d.clone());
                self.net.send(self.now, d);
            }
        }
    }

    /// The next time anything happens (an arrival or a timer), if anything will.
    pub fn next_event(&self) -> Option<Nanos> {
        let timers = self
            .nodes
            .iter()
            .flat_map(|n| [n.engine.poll_timeout(), n.tx_wakeup])
            .flatten()
            .min();
        match (self.net.next_arrival(), timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Steps until nothing is left to happen or `limit` is reached.
    pub fn run_until_idle(&mut self, limit: Nanos) {
        while self.step(limit) {}
    }

    /// Sends what is pending, then advances the clock to the next event (but not past
    /// `limit`) and processes everything due. Returns false when nothing is left to happen
    /// before `limit`.
    pub fn step(&mut self, limit: Nanos) -> bool {
        self.transmit();
        self.check_timers();
        let Some(next) = self.next_event() else {
            return false;
        };
        if next > limit {
            self.now = self.now.max(limit);
            return false;
        }
        self.now = self.now.max(next);
        let mut due = Vec::new();
        while let Some(d) = self.net.pop_due(self.now) {
            let hdr = ip_udp(
                self.nodes[d.from].ip,
                self.nodes[d.to].ip,
                d.src_port,
                d.data.len(),
            );
            if icrc::verify(&hdr, &d.data).is_err() {
                self.stats.bad_icrc += 1;
                continue;
            }
            if self.trace {
                crate::trace::packet(self.now, d.from, d.to, &d.data, "");
            }
            due.push(d);
        }
        // Packets that came one after another from one source with one mark go together,
        // as a driver hands over a GRO message (unless `per_packet`).
        for run in
            due.chunk_by(|a, b| !self.per_packet && (a.from, a.to, a.ce) == (b.from, b.to, b.ce))
        {
            let (d, src) = (&run[0], Gid::from(self.nodes[run[0].from].ip));
            let packets = run.iter().map(|d| &d.data[..]);
            self.nodes[d.to]
                .engine
                .handle_packets(self.now, src, d.ce, packets);
        }
        self.check_timers();
        for n in &mut self.nodes {
            if n.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                n.engine.handle_timeout(self.now);
            }
        }
        self.check_timers();
        self.transmit();
        true
    }

    /// Every engine's timer queue agrees with its QPs' own deadlines (after each kind of
    /// event, so a queue update missed by one of them is caught there).
    fn check_timers(&self) {
        for n in &self.nodes {
            assert_eq!(
                n.engine.poll_timeout(),
                n.engine.poll_timeout_by_scan(),
                "timer queue out of date on {}",
                n.ip
            );
        }
    }
}
