//! One engine per device: owns the verbs objects and drives every QP. Sans-IO: packets and
//! time come in through `handle_packet` / `handle_timeout`, packets go out through
//! `poll_transmit`, and `poll_timeout` says when to call back.

use crate::attr::AddressVector;
use crate::cm::{Cm, CmConfig, CmEvent};
use crate::counters::{classes, Counter, Counters};
use crate::cq::Cq;
use crate::drops::{RxDrop, RxDrops};
use crate::error::VerbsError;
use crate::gid::Gid;
use crate::keys::MrTable;
use crate::limits::{DeviceAttr, PeerLimits, MAX_PACKET};
use crate::qp::{Ctx, Doorbells, Qp, ReorderPool};
use crate::secure::OpenError;
use crate::srq::Srq;
use crate::timers::TimerQueue;
use crate::verbs::{AsyncEvent, Mtu, QpType};
use crate::Nanos;
use oxrdma_wire::bth::Bth;
use oxrdma_wire::{BthRepr, Operation, PacketRepr, Run, Transport};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use share::Sharing;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// What identifies a device on the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// The device's GID table (its IP addresses), by index: an address vector's
    /// `sgid_index` picks the one its packets leave from. Never empty.
    pub gids: Vec<Gid>,
    /// The largest path MTU the port supports.
    pub max_mtu: Mtu,
    /// Device limits (`ibv_device_attr`) the engine enforces.
    pub attr: DeviceAttr,
    /// Speak selective repeat with peers that do (oxrdma's; see `oxrdma_wire::sack`): RC
    /// requests offer it, and a responder asked keeps packets that arrive ahead of a gap.
    /// Off, the device behaves as Linux rxe: go-back-N, and the bit is ignored.
    pub selective_repeat: bool,
    /// Where the device shares its address with other processes: the slot it owns, which
    /// its QPNs and comm IDs are drawn from (`slot.rs`). None: every number is its own.
    pub slot: Option<crate::Slot>,
    /// What remote peers may make the device spend.
    pub peer_limits: PeerLimits,
}

/// A packet `poll_transmit` wrote: `len` bytes at the start of the caller's buffer, to go to
/// `dest` from UDP source port `src_port` (destination port 4791). The last 4 bytes are
/// the ICRC, for the driver to fill in once it knows the IP header: with
/// `oxrdma_wire::icrc_part::complete` where `icrc_part::carries_part` says the engine left
/// the transport bytes' part there (long packets), else with `icrc::fill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The destination GID (the peer's IP address).
    pub dest: Gid,
    /// The index of the device GID it leaves from (None: the driver picks by `dest`, as
    /// for the CM's MADs).
    pub sgid: Option<u8>,
    /// UDP source port (RoCEv2 flow entropy: one per QP, a fixed one for MADs).
    pub src_port: u16,
    /// Bytes written at the start of the buffer, ICRC included.
    pub len: usize,
}

/// Counters of what the engine did with received packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handed to the engine.
    pub rx_packets: u64,
    /// Of those, packets the run path took (the packets after the first of a run of one
    /// WRITE stream or of one READ's responses: see `handle_packets`).
    pub rx_run: u64,
    /// Received packets not acted on, by reason.
    pub rx_drops: RxDrops,
    /// Packets the engine built for transmission, the CM's MADs included.
    pub tx_packets: u64,
    /// Of those, packets the send run path built (the middle packets after a request:
    /// `Qp::next_request_run`).
    pub tx_run: u64,
    /// Received packets whose IP header said CE (congestion experienced), and CNPs.
    pub rx_ce: u64,
    /// RoCEv2 congestion notification packets (CNPs) received.
    pub cnps_received: u64,
}

/// The sans-IO RDMA engine of one device.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    rng: ChaCha20Rng,
    pds: BTreeSet<u32>,
    next_pd: u32,
    cqs: BTreeMap<u32, Cq>,
    next_cq: u32,
    mrs: MrTable,
    qps: BTreeMap<u32, Qp>,
    /// iWARP QPs (`iwarp.rs`): the same numbers' space, another transport.
    iw: BTreeMap<u32, iwarp::IwQp>,
    /// iWARP QPs that took posted work, moved, or had their stream set up since the
    /// driver last looked (`take_iwarp_touched`).
    iw_touched: Vec<u32>,
    srqs: BTreeMap<u32, Srq>,
    next_srq: u32,
    /// Address handles: their PD and destination.
    ahs: BTreeMap<u32, (u32, AddressVector)>,
    next_ah: u32,
    /// QPs that application threads posted send work on.
    bells: Arc<Doorbells>,
    /// QPs that may have something to send, in round-robin order.
    active: VecDeque<u32>,
    /// The QP that sent the last packet, and how many it has sent in a row.
    burst_qpn: u32,
    burst: u32,
    /// Build a message's middle packets in runs (`Qp::next_request_run`); off, packet by
    /// packet, the reference the simulator checks the runs against.
    send_runs: bool,
    /// Every QP's next deadline.
    timers: TimerQueue,
    /// The QPs with work outstanding, which share the host's window.
    sharing: Sharing,
    events: VecDeque<AsyncEvent>,
    /// The connection manager behind QP1.
    cm: Cm,
    /// The PSN of the next MAD QP1 sends (one count per device, as on Linux).
    gsi_psn: u32,
    stats: Stats,
    /// What the device counts itself (traffic; its drops are `stats.rx_drops`).
    counts: Counters,
    /// The per-QP counts of QPs destroyed, so the device's sums never go back.
    retired: Counters,
    /// What its QPs keep ahead of gaps, together.
    reorder_pool: Arc<ReorderPool>,
    /// Where a secure QP's packet is opened (`crate::secure`).
    opened: Box<[u8]>,
    /// Whether an application thread polls, serving the timers (`set_app_serves_timers`).
    app_serves_timers: bool,
}

/// The context a QP works in, borrowed field by field from the engine (so a QP borrowed
/// from `self.qps` can use it).
macro_rules! ctx {
    ($e:ident, $now:expr) => {
        Ctx {
            now: $now,
            mrs: &mut $e.mrs,
            cqs: &mut $e.cqs,
            srqs: &mut $e.srqs,
            events: &mut $e.events,
            drops: &mut $e.stats.rx_drops,
            limits: &$e.config.peer_limits,
            app_serves_timers: $e.app_serves_timers,
        }
    };
}

mod gsi;
mod iwarp;
pub use iwarp::IwarpStream;
mod objects;
mod qps;
mod share;

/// After an event on `qp`: queue it to transmit, and move it in the timer queue if its next
/// deadline changed.
fn touched(
    active: &mut VecDeque<u32>,
    timers: &mut TimerQueue,
    sharing: &mut Sharing,
    qp: &mut Qp,
) {
    schedule(active, qp);
    rearm(timers, sharing, qp);
}

/// After an event on `qp`: moves it in the timer queue if its next deadline changed, and
/// counts it among the senders sharing the host's window if it has work outstanding.
fn rearm(timers: &mut TimerQueue, sharing: &mut Sharing, qp: &mut Qp) {
    sharing.update(qp);
    let next = qp.next_deadline();
    timers.requeue(qp.qpn, qp.queued_deadline, next);
    qp.queued_deadline = next;
}

/// Packets a QP sends in a row while others wait: the UDP driver's whole send batch (60
/// slots), so that a batch is one QP's and goes out through that QP's source-port socket
/// in one system call (four GSO messages at a 4 KiB MTU). Packet by packet round robin
/// over 64 QPs made every message of a batch one packet from another QP; bursts of 16 put
/// two QPs, often on two sockets, in each batch: twice the `sendmmsg` calls per byte with
/// `-q 64`.
const BURST: u32 = 60;

fn schedule(active: &mut VecDeque<u32>, qp: &mut Qp) {
    if !qp.scheduled {
        qp.scheduled = true;
        active.push_back(qp.qpn);
    }
}

impl Engine {
    /// A new engine. `seed` feeds the CSPRNG that draws keys, QPNs and PSNs: take it from the
    /// OS in production, from the test's seed in simulation.
    pub fn new(config: EngineConfig, seed: [u8; 32]) -> Engine {
        let mut rng = ChaCha20Rng::from_seed(seed);
        let cm = Cm::new(
            CmConfig {
                slot: config.slot,
                pending_per_peer: config.peer_limits.cm_pending_per_peer,
                conns_per_peer: config.peer_limits.cm_conns_per_peer,
                ..CmConfig::new(config.gids.first().copied().unwrap_or_default())
            },
            rng.next_u32(),
        );
        let config_reorder_bytes = config.peer_limits.reorder_bytes;
        Engine {
            config,
            rng,
            pds: BTreeSet::new(),
            next_pd: 1,
            cqs: BTreeMap::new(),
            next_cq: 1,
            mrs: MrTable::default(),
            qps: BTreeMap::new(),
            iw: BTreeMap::new(),
            iw_touched: Vec::new(),
            ahs: BTreeMap::new(),
            next_ah: 1,
            srqs: BTreeMap::new(),
            next_srq: 1,
            bells: Arc::default(),
            active: VecDeque::new(),
            burst_qpn: 0,
            burst: 0,
            send_runs: true,
            timers: TimerQueue::default(),
            sharing: Sharing::default(),
            events: VecDeque::new(),
            cm,
            gsi_psn: 0,
            stats: Stats::default(),
            counts: Counters::default(),
            retired: Counters::default(),
            reorder_pool: ReorderPool::new(config_reorder_bytes),
            opened: vec![0; MAX_PACKET].into_boxed_slice(),
            app_serves_timers: true,
        }
    }

    /// Requests received so far (SENDs, WRITEs, READ requests, atomics; RoCE QPs), a
    /// count cheap to read: a thread waiting for a peer's answer compares it.
    pub fn requests_received(&self) -> u64 {
        [
            Counter::RcvdSend,
            Counter::RcvdWrite,
            Counter::RcvdReadRequest,
            Counter::RcvdAtomic,
        ]
        .iter()
        .map(|&c| self.counts[c])
        .sum()
    }

    /// Says whether an application thread polls the device, and so serves the engine's
    /// timers in its polls (true until said otherwise). While none does, the driver's own
    /// thread would wake for each: a ping-pong's held ACK then waits longer for the answer
    /// to take it along (`qp/ack_hold.rs`) rather than wake that thread for itself.
    pub fn set_app_serves_timers(&mut self, yes: bool) {
        self.app_serves_timers = yes;
    }

    /// What the engine was made with (selective repeat as last set).
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Turns selective repeat on or off for QPs created from now on
    /// (`EngineConfig::selective_repeat`).
    pub fn set_selective_repeat(&mut self, on: bool) {
        self.config.selective_repeat = on;
    }
    /// The device's first GID.
    pub fn gid(&self) -> Gid {
        self.config.gids.first().copied().unwrap_or_default()
    }

    /// The device's GID at `index`, if its table has one there.
    pub fn gid_at(&self, index: u8) -> Option<Gid> {
        self.config.gids.get(usize::from(index)).copied()
    }
    /// Counters of packets received, transmitted and dropped.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The device's counters: its own, its drops by reason, and the sums of what its QPs,
    /// live and destroyed, count (`counters.rs`).
    pub fn counters(&self) -> Counters {
        let mut c = self.counts;
        for &why in &RxDrop::ALL {
            c[Counters::drop_counter(why)] += self.stats.rx_drops.get(why);
        }
        let cm = self.cm.stats();
        c[Counter::CmBacklogFull] += cm.backlog_full;
        c[Counter::CmPeerLimited] += cm.peer_limited;
        c.add(&self.retired, Counter::per_qp);
        for qp in self.qps.values() {
            c.add(&qp.counters(), Counter::per_qp);
        }
        self.iwarp_counters(&mut c);
        c
    }

    /// One QP's counters.
    pub fn qp_counters(&self, qpn: u32) -> crate::Result<Counters> {
        if let Some(c) = self.iwarp_qp_counters(qpn) {
            return Ok(c);
        }
        self.qps
            .get(&qpn)
            .map(|q| q.counters())
            .ok_or(VerbsError::NotFound("queue pair"))
    }

    /// Builds a message's middle packets in runs when a caller takes many packets at once
    /// (on by default); off, `poll_transmit_many` builds every packet on its own, as the
    /// simulator's reference.
    pub fn set_send_runs(&mut self, on: bool) {
        self.send_runs = on;
    }

    /// A random 24-bit PSN, for a QP's initial send PSN.
    pub fn random_psn(&mut self) -> u32 {
        self.rng.next_u32() & 0xff_ffff
    }

    /// Answers the doorbells: each QP that application threads posted send work on takes
    /// it into its send queue and is scheduled to transmit.
    pub fn answer_doorbells(&mut self) {
        while let Some(qpn) = self.bells.pop() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                let _ = self.iwarp_take_posted(qpn);
                continue;
            };
            let (ahs, pd) = (&self.ahs, qp.pd);
            let resolve = |ah| ahs.get(&ah).filter(|a| a.0 == pd).map(|a| a.1);
            let mut ctx = ctx!(self, 0);
            qp.take_posted(&mut ctx, resolve);
            touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
        }
    }

    /// A UDP payload that arrived from `src`, with its ICRC already checked by the driver.
    pub fn handle_packet(&mut self, now: Nanos, src: Gid, data: &[u8]) {
        self.handle_packet_ecn(now, src, data, false);
    }

    /// `handle_packet` for a packet whose IP header's ECN field said CE (`ce`: a queue on
    /// the path is filling; the QP tells its peer with a CNP).
    pub fn handle_packet_ecn(&mut self, now: Nanos, src: Gid, data: &[u8], ce: bool) {
        self.handle_one(now, src, self.gid(), data, ce);
    }

    /// One packet from `src` to the device's GID `local`.
    fn handle_one(&mut self, now: Nanos, src: Gid, local: Gid, data: &[u8], ce: bool) {
        self.stats.rx_packets += 1;
        self.stats.rx_ce += u64::from(ce);
        let class = data.first().map_or(Counter::RcvdOther, |&op| classes(op).1);
        count_traffic(&mut self.counts, Counter::RcvdPkts, class, 1, data.len());
        self.counts[Counter::EcnMarked] += u64::from(ce);
        let drops = &mut self.stats.rx_drops;
        // A secure QP's packet parses only once opened: its BTH says which QP it is for.
        let parsed = PacketRepr::parse(data);
        let bth = match &parsed {
            Ok(p) => p.bth,
            Err(_) => match Bth::new_checked(data).and_then(|b| BthRepr::parse(&b)) {
                Ok(b) => b,
                Err(_) => return drops.count(RxDrop::Malformed),
            },
        };
        if bth.dest_qpn == gsi::GSI_QPN {
            let Ok(pkt) = parsed else {
                return drops.count(RxDrop::Malformed);
            };
            return self.handle_gsi(now, src, &pkt);
        }
        let qp = match self.qps.get_mut(&bth.dest_qpn) {
            Some(qp) if parsed.is_ok() || qp.secure.is_some() => qp,
            Some(_) => return drops.count(RxDrop::Malformed),
            None if parsed.is_err() => return drops.count(RxDrop::Malformed),
            None => return drops.count(RxDrop::UnknownQp),
        };
        count_traffic(&mut qp.counts, Counter::RcvdPkts, class, 1, data.len());
        qp.counts[Counter::EcnMarked] += u64::from(ce);
        let Ok(info) = bth.opcode.info() else {
            return qp.dropped(drops, RxDrop::Malformed);
        };
        match (info.transport, qp.qp_type) {
            (Transport::Rc | Transport::Cnp, QpType::Rc) | (Transport::Uc, QpType::Uc) => {
                if qp.av.map(|a| a.dgid) != Some(src) {
                    return qp.dropped(drops, RxDrop::WrongPeer);
                }
            }
            (Transport::Ud, QpType::Ud) => {}
            _ => return qp.dropped(drops, RxDrop::WrongTransport),
        }
        // A secure QP's packet is opened into `opened`, and taken from there.
        let (data, pkt) = match (qp.secure.as_mut(), parsed) {
            (None, Ok(pkt)) => (data, pkt),
            (None, Err(_)) => return qp.dropped(drops, RxDrop::Malformed),
            (Some(s), _) => match s.open(data, &mut self.opened) {
                Ok(n) => {
                    let data = &self.opened[..n];
                    match PacketRepr::parse(data) {
                        Ok(pkt) => (data, pkt),
                        Err(_) => return qp.dropped(drops, RxDrop::Malformed),
                    }
                }
                Err(OpenError::Auth) => return qp.dropped(drops, RxDrop::AuthFailed),
                Err(OpenError::Replayed) => return qp.dropped(drops, RxDrop::Replayed),
            },
        };
        if info.transport == Transport::Cnp {
            self.stats.cnps_received += 1;
            return qp.handle_cnp();
        }
        let mut ctx = ctx!(self, now);
        let result = match (qp.qp_type, info.operation) {
            (QpType::Ud, _) => {
                let grh = crate::grh::grh(src, local, data.len());
                qp.handle_datagram(&mut ctx, &pkt, src, &grh)
            }
            (QpType::Uc, _) => qp.handle_uc_request(&mut ctx, &pkt),
            (
                _,
                Operation::Acknowledge | Operation::ReadResponse | Operation::AtomicAcknowledge,
            ) => qp.handle_response(&mut ctx, &pkt),
            _ => {
                if ce {
                    qp.congestion_marked(now, pkt.bth.selective_repeat);
                }
                qp.handle_request(&mut ctx, &pkt, data)
            }
        };
        if let Err(why) = result {
            ctx.drop_packet(why);
            qp.counts.bump(Counters::drop_counter(why));
        }
        touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
    }

    /// Packets that arrived together from `src` (the segments of one GRO message), each as
    /// [`Self::handle_packet_ecn`] would take it. Those that continue an RDMA WRITE stream
    /// or a READ's responses after a packet of it take the run path: read by comparing
    /// bytes (`Run`), the QP found and its peer checked once for the run; a WRITE's QP
    /// state read and rkey resolved once too (`qp/responder/run.rs`).
    pub fn handle_packets<'a>(
        &mut self,
        now: Nanos,
        src: Gid,
        ce: bool,
        packets: impl IntoIterator<Item = &'a [u8]>,
    ) {
        self.handle_packets_to(now, src, self.gid(), ce, packets);
    }

    /// [`Self::handle_packets`] for packets sent to the device's GID `local` (a device
    /// with many addresses: a UD receive's GRH says which).
    pub fn handle_packets_to<'a>(
        &mut self,
        now: Nanos,
        src: Gid,
        local: Gid,
        ce: bool,
        packets: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let mut packets = packets.into_iter().peekable();
        while let Some(data) = packets.next() {
            self.handle_one(now, src, local, data, ce);
            // Marked packets go one by one: each may owe the peer a CNP.
            if ce {
                continue;
            }
            let Some(run) = Run::after(data) else {
                continue;
            };
            let Some(qp) = self.qps.get_mut(&run.dest_qpn()) else {
                continue;
            };
            // A secure QP's packets are opened one by one.
            if qp.qp_type != QpType::Rc || qp.av.map(|a| a.dgid) != Some(src) || qp.secure.is_some()
            {
                continue;
            }
            let ((taken, bytes), class) = if run.requests() {
                let t = qp.write_run(now, self.app_serves_timers, &self.mrs, &run, &mut packets);
                (t, Counter::RcvdWrite)
            } else {
                let t = qp.response_run(&mut ctx!(self, now), &run, &mut packets);
                (t, Counter::RcvdReadResponse)
            };
            if taken > 0 {
                count_traffic(&mut self.counts, Counter::RcvdPkts, class, taken, bytes);
                count_traffic(&mut qp.counts, Counter::RcvdPkts, class, taken, bytes);
                self.stats.rx_packets += taken;
                self.stats.rx_run += taken;
                touched(&mut self.active, &mut self.timers, &mut self.sharing, qp);
            }
        }
    }

    /// Fires every timer due at `now` (only the QPs that are due are visited).
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.cm.handle_timeout(now);
        for qpn in self.timers.due(now) {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = ctx!(self, now);
            if qp.handle_timers(&mut ctx) {
                schedule(&mut self.active, qp);
            }
            rearm(&mut self.timers, &mut self.sharing, qp);
        }
    }

    /// The earliest time `handle_timeout` has work to do.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        earliest(self.timers.next(), self.cm.poll_timeout())
    }

    /// `poll_timeout` the slow way, by asking every QP: for tests that check the timer
    /// queue never misses a change.
    #[doc(hidden)]
    pub fn poll_timeout_by_scan(&self) -> Option<Nanos> {
        let qps = self.qps.values().filter_map(|q| q.next_deadline()).min();
        earliest(qps, self.cm.poll_timeout())
    }

    /// Writes the next packet to send into `buf` (at least [`MAX_PACKET`] bytes).
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        assert!(
            buf.len() >= MAX_PACKET,
            "poll_transmit needs a buffer of MAX_PACKET bytes"
        );
        let mut sent = None;
        self.poll_transmit_many(now, &mut buf[..MAX_PACKET], |t| sent = Some(t));
        sent
    }

    /// [`Self::poll_transmit`] for as many packets as `slots` holds buffers of
    /// [`MAX_PACKET`] bytes, written back to back: each packet handed to `sent` starts
    /// where the one before it ended (the first at 0), so a driver hands a run of them to
    /// the kernel as one piece of memory. A QP's burst is built in one go (one lookup and
    /// one timer update for all its packets).
    pub fn poll_transmit_many(
        &mut self,
        now: Nanos,
        slots: &mut [u8],
        mut sent: impl FnMut(Transmit),
    ) {
        let max = slots.len() / MAX_PACKET;
        if max == 0 {
            return;
        }
        // Packet `n` starts at `at` <= n * MAX_PACKET, so it always has MAX_PACKET bytes.
        let (mut at, mut n) = (0, 0);
        self.answer_doorbells();
        while n < max {
            let Some(t) = self.next_mad(&mut slots[at..at + MAX_PACKET]) else {
                break;
            };
            let class = classes(slots[at]).0;
            count_traffic(&mut self.counts, Counter::SentPkts, class, 1, t.len);
            sent(t);
            (at, n) = (at + t.len, n + 1);
        }
        let mut room = n < max;
        while room {
            let Some(qpn) = self.active.pop_front() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.scheduled = false;
            // A secure QP with no key to seal under sends nothing (`secure_qp_send`
            // schedules it again); one in RTR replies under its reply key.
            if qp.secure.as_ref().is_some_and(|s| !s.can_reply()) {
                continue;
            }
            // This QP's packets until it has none, the room is used up, or its burst ends
            // with another QP waiting (alone, it is its own next).
            let more = loop {
                // The packets this QP may send after the next one before its turn ends,
                // if another QP waits: the turn's last asks for an ACK.
                let burst = if self.burst_qpn == qpn { self.burst } else { 0 } + 1;
                let after = (!self.active.is_empty()).then(|| BURST.saturating_sub(burst));
                qp.set_turn(after.map(|a| a + 1));
                let buf = &mut slots[at..at + MAX_PACKET];
                let mut ctx = ctx!(self, now);
                let (len, dest, request) = match qp.next_response(buf) {
                    Some(len) => (Some(len), None, false),
                    None => {
                        let (len, dest) = qp.next_request(&mut ctx, buf);
                        (len, dest, true)
                    }
                };
                let Some(len) = len else {
                    break false;
                };
                let len = match qp.secure.as_mut() {
                    Some(s) => s.seal(&mut slots[at..at + MAX_PACKET], len),
                    None => len,
                };
                // The middle packets that follow a request at once, built in one call, up
                // to where the room or the QP's burst ends (`request_run.rs`).
                let limit = (max - n - 1).min(after.map_or(usize::MAX, |a| a as usize));
                qp.set_turn(after);
                let (run, run_len) = if request && self.send_runs && limit > 0 {
                    qp.next_request_run(&mut ctx, &mut slots[at + len..], limit)
                } else {
                    (0, 0)
                };
                let run_len = match qp.secure.as_mut() {
                    Some(s) if run > 0 => seal_run(s, &mut slots[at + len..], run, run_len),
                    _ => run_len,
                };
                (self.burst, self.burst_qpn) = (burst + run as u32, qpn);
                self.stats.tx_packets += 1 + run as u64;
                self.stats.tx_run += run as u64;
                let class = classes(slots[at]).0;
                let run_class = if run > 0 {
                    classes(slots[at + len]).0
                } else {
                    class
                };
                for counts in [&mut self.counts, &mut qp.counts] {
                    count_traffic(counts, Counter::SentPkts, class, 1, len);
                    if run > 0 {
                        let (n, bytes) = (run as u64, run * run_len);
                        count_traffic(counts, Counter::SentPkts, run_class, n, bytes);
                    }
                }
                let av = dest.or(qp.av).unwrap_or_default();
                for len in std::iter::once(len).chain(std::iter::repeat_n(run_len, run)) {
                    sent(Transmit {
                        dest: av.dgid,
                        sgid: Some(av.sgid_index),
                        src_port: qp.udp_sport,
                        len,
                    });
                    (at, n) = (at + len, n + 1);
                }
                if n == max {
                    room = false;
                    break true;
                }
                if self.burst >= BURST && !self.active.is_empty() {
                    break true;
                }
            };
            if more {
                // A burst, then the next active QP's turn; cut short, it goes on first.
                if self.burst < BURST {
                    qp.scheduled = true;
                    self.active.push_front(qpn);
                } else {
                    schedule(&mut self.active, qp);
                }
            }
            rearm(&mut self.timers, &mut self.sharing, qp);
        }
    }

    /// The next asynchronous event, if any.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// The connection manager, for its user's calls (connect, listen, accept, ...): what
    /// it sends goes out with the next `poll_transmit`.
    pub fn cm_mut(&mut self) -> &mut Cm {
        &mut self.cm
    }

    /// The connection manager, to read its configuration and counters.
    pub fn cm(&self) -> &Cm {
        &self.cm
    }

    /// The next connection manager event, if any.
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.cm.poll_event()
    }
}

/// Seals the `run` packets of `len` bytes at the start of `slots`, each followed by room
/// for its trailer (`run_gap`); returns their new length.
fn seal_run(s: &mut crate::secure::Secured, slots: &mut [u8], run: usize, len: usize) -> usize {
    let sealed = len + crate::secure::TRAILER;
    for k in 0..run {
        s.seal(&mut slots[k * sealed..], len);
    }
    sealed
}

fn earliest(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `n` packets of `bytes` in all, of the traffic class `class`, into `packets` (sent or
/// received).
#[inline]
fn count_traffic(counts: &mut Counters, packets: Counter, class: Counter, n: u64, bytes: usize) {
    let total = if packets == Counter::SentPkts {
        Counter::SentBytes
    } else {
        Counter::RcvdBytes
    };
    counts[packets] += n;
    counts[total] += bytes as u64;
    counts[class] += n;
}
