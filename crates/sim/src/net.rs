//! The simulated network: per-direction links with bandwidth and delay, and seeded random
//! loss, reordering, duplication, corruption and partitions.

use oxrdma_core::Nanos;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// How the network misbehaves. Rates are probabilities per packet.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// Extra random delay, uniform in 0..jitter.
    pub jitter: Nanos,
    /// Link bandwidth in bits per second (per direction); 0 is infinite.
    pub bandwidth_bps: u64,
    /// Time windows during which every packet is dropped.
    pub partitions: Vec<(Nanos, Nanos)>,
    /// Time windows during which nothing arrives: what would, arrives in order at the
    /// window's end (a host whose virtual machine was descheduled, a slow rxe's pauses).
    pub stalls: Vec<(Nanos, Nanos)>,
    /// A tail-drop queue at each egress port: a packet that would wait longer than this
    /// before it starts on the wire is dropped (a router queue of `queue_limit` times the
    /// bandwidth in bytes). 0: unbounded.
    pub queue_limit: Nanos,
    /// ECN marking at each egress port: a packet that waits longer than this before it
    /// starts on the wire arrives marked CE (every packet is ECN-capable). 0: none.
    pub ecn_threshold: Nanos,
    /// A router on each directed link, slower than the senders' ports, in bits per
    /// second (0: none). Its queue is where packets wait, then: `queue_limit` and
    /// `ecn_threshold` apply there, as on a path through a slower network.
    pub bottleneck_bps: u64,
    /// Receivers take arrivals in rounds of this period (ns), as a NIC that moderates its
    /// interrupts and glues a flow's packets (GRO) hands them over: what arrived since the
    /// last round comes at once. 0: each packet as it arrives.
    pub rx_every: Nanos,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            delay: 5_000,
            jitter: 0,
            bandwidth_bps: 10_000_000_000,
            partitions: Vec::new(),
            stalls: Vec::new(),
            queue_limit: 0,
            ecn_threshold: 0,
            bottleneck_bps: 0,
            rx_every: 0,
        }
    }
}

/// A datagram on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub from: usize,
    pub to: usize,
    pub src_port: u16,
    pub data: Vec<u8>,
    /// The IP header's ECN field says CE (congestion experienced).
    pub ce: bool,
}

/// What the network did, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    pub sent: u64,
    pub sent_bytes: u64,
    pub lost: u64,
    pub partitioned: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    pub delivered: u64,
    /// Dropped because the egress queue was full (`NetConfig::queue_limit`).
    pub queue_drops: u64,
    /// Marked CE (`NetConfig::ecn_threshold`).
    pub ce_marked: u64,
}

#[derive(Debug)]
pub struct Network {
    pub config: NetConfig,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(Nanos, u64)>>,
    packets: HashMap<u64, Datagram>,
    seq: u64,
    /// When each node's egress port finishes sending what it has queued.
    busy_until: HashMap<usize, Nanos>,
    /// When each directed link's router finishes sending what it has queued
    /// (`NetConfig::bottleneck_bps`).
    router_busy: HashMap<(usize, usize), Nanos>,
    /// Latest arrival scheduled on each directed link: jitter alone never reorders.
    last_arrival: HashMap<(usize, usize), Nanos>,
    pub stats: NetStats,
    /// Print each packet lost (`OXRDMA_SIM_TRACE`, as `World` prints those delivered).
    trace: bool,
}

impl Network {
    pub fn new(config: NetConfig, rng: ChaCha8Rng) -> Network {
        Network {
            config,
            rng,
            queue: BinaryHeap::new(),
            packets: HashMap::new(),
            seq: 0,
            busy_until: HashMap::new(),
            router_busy: HashMap::new(),
            last_arrival: HashMap::new(),
            stats: NetStats::default(),
            trace: false,
        }
    }

    /// The same, printing each packet it loses.
    pub fn traced(self, trace: bool) -> Network {
        Network { trace, ..self }
    }

    fn enqueue(&mut self, at: Nanos, d: Datagram) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.packets.insert(self.seq, d);
    }

    /// Puts a datagram on the wire at `now`.
    pub fn send(&mut self, now: Nanos, d: Datagram) {
        self.send_held(now, d, 0);
    }

    /// Sends `d` and holds it back `hold` longer than the link would (later packets may
    /// overtake it).
    pub fn send_held(&mut self, now: Nanos, d: Datagram, hold: Nanos) {
        let c = &self.config;
        self.stats.sent += 1;
        self.stats.sent_bytes += d.data.len() as u64;
        // Serialisation: the port sends one packet at a time.
        let link = self.busy_until.entry(d.from).or_insert(0);
        let router = c.bottleneck_bps > 0;
        if !router && c.queue_limit > 0 && link.saturating_sub(now) > c.queue_limit {
            self.stats.queue_drops += 1;
            return;
        }
        let mut ce = !router && c.ecn_threshold > 0 && link.saturating_sub(now) > c.ecn_threshold;
        let bits = (d.data.len() as u64 + 66) * 8 * 1_000_000_000;
        let wire_ns = bits.checked_div(c.bandwidth_bps).unwrap_or(0);
        let mut departs = (*link).max(now) + wire_ns;
        *link = departs;
        if router {
            // Then through the router's queue, at its pace.
            let busy = self.router_busy.entry((d.from, d.to)).or_insert(0);
            let wait = busy.saturating_sub(departs);
            if c.queue_limit > 0 && wait > c.queue_limit {
                self.stats.queue_drops += 1;
                return;
            }
            ce = c.ecn_threshold > 0 && wait > c.ecn_threshold;
            departs = (*busy).max(departs) + bits / c.bottleneck_bps;
            *busy = departs;
        }
        if c.partitions.iter().any(|&(a, b)| (a..b).contains(&now)) {
            self.stats.partitioned += 1;
            return;
        }
        if self.rng.random_bool(c.loss) {
            self.stats.lost += 1;
            if self.trace {
                crate::trace::packet(now, d.from, d.to, &d.data, " lost");
            }
            return;
        }
        let copies = if self.rng.random_bool(c.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let c = &self.config;
            let mut at = departs + c.delay;
            if c.jitter > 0 {
                at += self.rng.random_range(0..c.jitter);
            }
            if let Some(&(_, end)) = c.stalls.iter().find(|&&(a, b)| (a..b).contains(&at)) {
                at = end;
            }
            let last = self.last_arrival.entry((d.from, d.to)).or_insert(0);
            at = at.max(*last);
            *last = at;
            at += hold;
            if self.rng.random_bool(c.reorder) {
                // Held back long enough for a few later packets to overtake it.
                at += self.rng.random_range(1..=4 * c.delay.max(1_000));
                self.stats.reordered += 1;
            }
            let mut d = d.clone();
            d.ce |= ce;
            if self.rng.random_bool(c.corrupt) && !d.data.is_empty() {
                let i = self.rng.random_range(0..d.data.len());
                d.data[i] ^= 1 << self.rng.random_range(0..8);
                self.stats.corrupted += 1;
            }
            self.enqueue(at, d);
        }
        if copies == 2 {
            self.stats.duplicated += 1;
        }
        self.stats.ce_marked += u64::from(ce);
    }

    /// How long the egress port of `node` is busy after `now` with what it already holds.
    pub fn backlog(&self, node: usize, now: Nanos) -> Nanos {
        self.busy_until
            .get(&node)
            .map_or(0, |&t| t.saturating_sub(now))
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<Nanos> {
        let t = self.queue.peek()?.0 .0;
        let every = self.config.rx_every;
        Some(if every == 0 {
            t
        } else {
            t.div_ceil(every) * every
        })
    }

    /// The next datagram due at or before `now`.
    pub fn pop_due(&mut self, now: Nanos) -> Option<Datagram> {
        let Reverse((t, seq)) = *self.queue.peek()?;
        if t > now {
            return None;
        }
        self.queue.pop();
        self.stats.delivered += 1;
        self.packets.remove(&seq)
    }

    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }
}
