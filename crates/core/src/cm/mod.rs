//! The InfiniBand connection manager (IBA chapter 12) as Linux's speaks it over RoCEv2:
//! CM MADs to and from QP1, connections by comm ID, their retries, MRAs, timewait, and
//! SIDR for UD. Sans-IO like the rest of the core: MADs and time go in (`handle_mad`,
//! `handle_timeout`), MADs and events come out (`poll_mad`, `poll_event`). What the RDMA
//! CM adds on top (addresses, ports, the CMA header, moving QPs) is its user's.

mod conn;
mod receive;
mod types;

pub use types::*;

use crate::gid::Gid;
use crate::Nanos;
use conn::{iba_time, Conn, State};
use oxrdma_wire::cm::{attr, CmPath, CommIds, Rej, Rep, Req, SidrRep, SidrReq};
use oxrdma_wire::mad::{MadHeader, MAD_HEADER_LEN, MAD_LEN};
use std::collections::{BTreeSet, HashMap, VecDeque};

/// What the CM says of its device, and Linux's timing defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The device's GID (`new` derives the node GUID from it).
    pub gid: Gid,
    /// The node GUID (the REQ's and REP's local CA GUID, a REJ timeout's ARI).
    pub guid: u64,
    /// The path's packet life time (Linux RoCE: 18).
    pub packet_life: u8,
    /// The CM response timeout a REQ announces (Linux: 20, 4.3 s).
    pub response_timeout: u8,
    /// How many times a REQ, REP, DREQ or SIDR_REQ is sent again (Linux: 15).
    pub max_retries: u8,
    /// The target ACK delay a REP announces (rxe: 15).
    pub ack_delay: u8,
    /// How long after its first REQ a connection takes REJ "invalid service ID" as "not
    /// listening yet" and asks again (every `LISTEN_RETRY`) before giving up: programs
    /// such as perftest stop listening after their first connection and listen again for
    /// the next, counting on the connecting side to be slower than that. Linux has no
    /// such wait; 0 turns it off.
    pub listen_grace: Nanos,
    /// Where the device shares its address: the slot its comm IDs (and SIDR request IDs)
    /// come from, so that the kernel hands their answers to this process.
    pub slot: Option<crate::Slot>,
    /// Unanswered requests from one peer, at most (`PeerLimits::cm_pending_per_peer`).
    pub pending_per_peer: u32,
    /// Passive connections from one peer, at most (`PeerLimits::cm_conns_per_peer`).
    pub conns_per_peer: u32,
}

impl CmConfig {
    /// Linux's values for a device with `gid`; the GUID is made from the GID.
    pub fn new(gid: Gid) -> CmConfig {
        let g = gid.0;
        let guid = u64::from_be_bytes([0x02, 0x0a, 0xd5, 0xff, g[12], g[13], g[14], g[15]]);
        CmConfig {
            gid,
            guid,
            packet_life: 18,
            response_timeout: 20,
            max_retries: 15,
            ack_delay: 15,
            listen_grace: 100_000_000,
            slot: None,
            pending_per_peer: crate::PeerLimits::default().cm_pending_per_peer,
            conns_per_peer: crate::PeerLimits::default().cm_conns_per_peer,
        }
    }
}

/// A service ID listened on.
#[derive(Debug)]
struct Listener {
    backlog: usize,
    /// Requests handed up and not yet answered.
    pending: usize,
}

/// A peer's passive connections that count against `CmConfig`'s per-peer limits.
#[derive(Debug, Clone, Copy, Default)]
struct PeerCount {
    /// Connections not in timewait.
    live: u32,
    /// Of those, requests the application has not answered.
    pending: u32,
}

/// How soon a REQ refused for want of a listener goes again (within `listen_grace`).
const LISTEN_RETRY: Nanos = 5_000_000;
/// MRA's service timeout as Linux's RDMA CM sends it (2^24 × 4.096 µs, about 69 s).
const MRA_SERVICE_TIMEOUT: u8 = 24;
/// Connections waiting for their timewait to end, at most (older ones end early).
const MAX_TIMEWAIT: usize = 65536;

/// The connection manager of one device.
#[derive(Debug)]
pub struct Cm {
    config: CmConfig,
    /// Comm IDs are a counter XOR a random operand, as on Linux.
    next_id: u32,
    id_xor: u32,
    conns: HashMap<u32, Conn>,
    /// Passive connections by the peer and its comm ID (repeated REQs find theirs).
    by_remote: HashMap<(Gid, u32), u32>,
    listeners: HashMap<u64, Listener>,
    /// Passive connections by peer: how many count against its limits.
    peers: HashMap<Gid, PeerCount>,
    timers: BTreeSet<(Nanos, u32)>,
    out: VecDeque<(Gid, [u8; MAD_LEN])>,
    events: VecDeque<CmEvent>,
    timewait: usize,
    stats: CmStats,
}

/// `len` bytes of private data padded with zeros to `N`, or too long.
fn padded<const N: usize>(data: &[u8]) -> Result<[u8; N], CmError> {
    let mut out = [0; N];
    out.get_mut(..data.len())
        .ok_or(CmError::PrivateDataTooLong { max: N })?
        .copy_from_slice(data);
    Ok(out)
}

/// The TID Linux gives a request: its sender's comm ID, bytes as on the wire read
/// little-endian, under a constant high half.
fn tid_of(comm_id: u32) -> u64 {
    2 << 32 | u64::from(comm_id.swap_bytes())
}

impl Cm {
    /// `random` seeds the comm IDs (take it from the engine's RNG).
    pub fn new(config: CmConfig, random: u32) -> Cm {
        Cm {
            config,
            next_id: 0,
            id_xor: random,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            listeners: HashMap::new(),
            peers: HashMap::new(),
            timers: BTreeSet::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            timewait: 0,
            stats: CmStats::default(),
        }
    }

    /// The configuration the CM was made with.
    pub fn config(&self) -> &CmConfig {
        &self.config
    }
    /// Counts of the CM MADs received, sent, resent and ignored.
    pub fn stats(&self) -> CmStats {
        self.stats
    }
    /// Connections the CM holds (timewait included).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Takes connection requests for `service_id`; at most `backlog` wait for an answer
    /// (more are dropped, and their senders retry).
    pub fn listen(&mut self, service_id: u64, backlog: usize) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::InUse);
        }
        let backlog = backlog.max(1);
        self.listeners.insert(
            service_id,
            Listener {
                backlog,
                pending: 0,
            },
        );
        Ok(())
    }

    /// The service IDs listened on.
    pub fn listening(&self) -> impl Iterator<Item = u64> + '_ {
        self.listeners.keys().copied()
    }

    /// Stops listening; requests already handed up stay.
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    /// Sends a REQ; the answer comes as `Reply`, `Rejected` or `Unreachable`.
    pub fn connect(&mut self, now: Nanos, p: &ConnectParams) -> Result<CmId, CmError> {
        let private_data = padded::<{ Req::PRIVATE_DATA }>(&p.private_data)?;
        let id = self.new_id();
        let c = &self.config;
        let req = Req {
            local_comm_id: id,
            vendor_id: 0,
            service_id: p.service_id,
            local_ca_guid: c.guid,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: c.response_timeout,
            transport: match p.transport {
                CmTransport::Rc => 0,
                CmTransport::Uc => 1,
            },
            e2e_flow_control: p.flow_control,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: c.response_timeout,
            retry_count: p.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: p.path_mtu as u8,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: c.max_retries,
            srq: p.srq,
            extended_transport: 0,
            primary: CmPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: p.source.0,
                remote_gid: p.dest.0,
                flow_label: p.flow_label & 0xf_ffff,
                packet_rate: 0,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: p.ack_timeout,
            },
            alternate: CmPath::default(),
            private_data,
        };
        let tid = tid_of(id);
        let timeout = 2 * iba_time(c.packet_life) + iba_time(c.response_timeout);
        let mut conn = self.conn(State::ReqSent, p.dest, tid, timeout, c.max_retries);
        conn.ack_timeout = p.ack_timeout;
        conn.first_sent = now;
        conn.last = self.build(attr::REQ, tid, |d| req.emit(d));
        self.conns.insert(id, conn);
        self.send_timed(now, id);
        Ok(CmId(id))
    }

    /// Passive: answers a `ConnectRequest` with a REP; the RTU brings `Established`.
    pub fn accept(&mut self, now: Nanos, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        let private_data = padded::<{ Rep::PRIVATE_DATA }>(&p.private_data)?;
        let c = self.get(id, &[State::ReqRcvd])?;
        let rep = Rep {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            local_eecn: 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            vendor_id: 0,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.config.ack_delay,
            failover_accepted: 0,
            e2e_flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq,
            local_ca_guid: self.config.guid,
            private_data,
        };
        let tid = c.tid;
        let mad = self.build(attr::REP, tid, |d| rep.emit(d));
        self.answered(id.0);
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        c.state = State::RepSent;
        c.last = mad;
        self.send_timed(now, id.0);
        Ok(())
    }

    /// Rejects a connection request (passive, before accepting) or a REP (active, before
    /// establishing) with reason 28 "consumer defined" and up to 148 bytes of private data.
    pub fn reject(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        padded::<{ Rej::PRIVATE_DATA }>(private_data)?;
        let c = self.get(id, &[State::ReqRcvd, State::RepRcvd])?;
        let rejected = if c.state == State::ReqRcvd { 0 } else { 1 };
        self.send_rej(id.0, Rej::CONSUMER_DEFINED, rejected, &[], private_data);
        self.remove(id.0);
        Ok(())
    }

    /// Active: sends the RTU after a `Reply` (the QP is at RTS by now).
    pub fn establish(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.get(id, &[State::RepRcvd])?;
        let ids = CommIds {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            extra: 0,
            private_data: [0; CommIds::PRIVATE_DATA],
        };
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.build(attr::RTU, tid, |d| ids.emit(attr::RTU, d));
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        c.state = State::Established;
        c.last = mad.clone();
        self.push(peer, mad);
        Ok(())
    }

    /// Passive: the QP received its first packet before the RTU (IBA's communication
    /// established event): the connection is up.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        self.get(id, &[State::RepSent])?;
        self.stop_timer(id.0);
        self.set_state(id.0, State::Established);
        self.event(id.0, CmEventKind::Established);
        Ok(())
    }

    /// Sends a DREQ (connected), or the DREP to the peer's DREQ; `Disconnected` follows
    /// the DREP (or its timeout), `TimewaitExit` the timewait.
    pub fn disconnect(&mut self, now: Nanos, id: CmId) -> Result<(), CmError> {
        let c = self.get(id, &[State::Established, State::RepSent, State::DreqRcvd])?;
        if c.state == State::DreqRcvd {
            self.send_drep(id.0);
            self.enter_timewait(now, id.0);
            return Ok(());
        }
        let ids = CommIds {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            extra: c.remote_qpn,
            private_data: [0; CommIds::PRIVATE_DATA],
        };
        let (tid, timeout, retries) = (tid_of(id.0), c.timeout, c.max_retries);
        let mad = self.build(attr::DREQ, tid, |d| ids.emit(attr::DREQ, d));
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        (c.state, c.last, c.tid, c.retries) = (State::DreqSent, mad, tid, retries);
        c.timeout = timeout;
        self.send_timed(now, id.0);
        Ok(())
    }

    /// The user is done with `id`: the CM ends the protocol as Linux does when an id is
    /// destroyed (a REQ still out is rejected with reason 4 "timeout"; an unanswered
    /// request or REP with 28; a connection is disconnected) and hands up nothing more.
    pub fn destroy(&mut self, now: Nanos, id: CmId) {
        let Some(c) = self.conns.get_mut(&id.0) else {
            return;
        };
        c.detached = true;
        match c.state {
            State::ReqSent => {
                let guid = self.config.guid.to_be_bytes();
                self.send_rej(id.0, Rej::TIMEOUT, 2, &guid, &[]);
                self.remove(id.0);
            }
            State::ReqRcvd | State::RepRcvd | State::RepSent => {
                let rejected = if c.state == State::RepRcvd { 1 } else { 0 };
                self.send_rej(id.0, Rej::CONSUMER_DEFINED, rejected, &[], &[]);
                self.remove(id.0);
            }
            State::Established => {
                // Linux sends the DREQ once and goes straight to timewait.
                let _ = self.disconnect(now, id);
                self.enter_timewait(now, id.0);
            }
            State::DreqRcvd => {
                let _ = self.disconnect(now, id);
            }
            State::DreqSent => self.enter_timewait(now, id.0),
            State::TimeWait => {}
            State::SidrReqSent | State::SidrReqRcvd => self.remove(id.0),
        }
    }

    /// Active UD: asks `dest` for the QPN behind `service_id` (up to 216 bytes of private
    /// data); the answer comes as `SidrReply` or `Unreachable`.
    pub fn sidr_request(
        &mut self,
        now: Nanos,
        dest: Gid,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let private_data = padded::<{ SidrReq::PRIVATE_DATA }>(private_data)?;
        let id = self.new_id();
        let req = SidrReq {
            request_id: id,
            pkey: 0xffff,
            service_id,
            private_data,
        };
        let tid = tid_of(id);
        let timeout = iba_time(self.config.response_timeout);
        let mut conn = self.conn(
            State::SidrReqSent,
            dest,
            tid,
            timeout,
            self.config.max_retries,
        );
        conn.last = self.build(attr::SIDR_REQ, tid, |d| req.emit(d));
        self.conns.insert(id, conn);
        self.send_timed(now, id);
        Ok(CmId(id))
    }

    /// Passive UD: answers a `SidrRequest`.
    pub fn sidr_reply(&mut self, id: CmId, p: &SidrReplyParams) -> Result<(), CmError> {
        let private_data = padded::<{ SidrRep::PRIVATE_DATA }>(&p.private_data)?;
        let c = self.get(id, &[State::SidrReqRcvd])?;
        let service_id = c.pending_on.unwrap_or_default();
        let rep = SidrRep {
            request_id: c.remote_id,
            status: p.status,
            info_length: 0,
            qpn: p.qpn & 0xff_ffff,
            service_id,
            qkey: p.qkey,
            info: [0; 72],
            private_data,
        };
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.build(attr::SIDR_REP, tid, |d| rep.emit(d));
        self.push(peer, mad);
        self.remove(id.0);
        Ok(())
    }

    /// The next MAD to send: its destination and its 256 bytes.
    pub fn poll_mad(&mut self) -> Option<(Gid, [u8; MAD_LEN])> {
        self.out.pop_front()
    }

    /// The next connection event, if any.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// The earliest time `handle_timeout` has work to do.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first().map(|t| t.0)
    }

    /// Resends what went unanswered, gives up after the retries, ends timewaits.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            c.deadline = None;
            if c.state == State::TimeWait {
                self.event(id, CmEventKind::TimewaitExit);
                self.remove(id);
                continue;
            }
            if c.retries > 0 {
                c.retries -= 1;
                let (peer, mad, at) = (c.peer, *c.last, now + c.timeout);
                self.stats.retransmitted += 1;
                self.push(peer, Box::new(mad));
                self.set_timer(id, at);
                continue;
            }
            match c.state {
                State::DreqSent => {
                    self.disconnected(id, true);
                    self.enter_timewait(now, id);
                }
                _ => {
                    self.event(id, CmEventKind::Unreachable);
                    self.remove(id);
                }
            }
        }
    }

    // --- helpers shared with `receive.rs` ---

    fn new_id(&mut self) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            let seq = self.next_id ^ self.id_xor;
            let id = self.config.slot.map_or(seq, |s| s.comm_id(seq));
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn conn(&self, state: State, peer: Gid, tid: u64, timeout: Nanos, retries: u8) -> Conn {
        Conn {
            state,
            peer,
            remote_id: 0,
            remote_qpn: 0,
            tid,
            last: Box::new([0; MAD_LEN]),
            retries,
            timeout,
            max_retries: retries,
            ack_timeout: self.config.packet_life + 1,
            deadline: None,
            detached: false,
            pending_on: None,
            counted: false,
            disconnected: false,
            first_sent: 0,
        }
    }

    /// The connection `id` if it is in one of `states`.
    fn get(&self, id: CmId, states: &[State]) -> Result<&Conn, CmError> {
        let c = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        if states.contains(&c.state) {
            Ok(c)
        } else {
            Err(CmError::InvalidState)
        }
    }

    /// A CM MAD of `attr_id` in transaction `tid`, its data written by `emit`.
    fn build(
        &self,
        attr_id: u16,
        tid: u64,
        emit: impl FnOnce(&mut [u8]) -> oxrdma_wire::Result<()>,
    ) -> Box<[u8; MAD_LEN]> {
        let mut mad = Box::new([0u8; MAD_LEN]);
        // Both cannot fail: the buffer has the MAD's size.
        let _ = MadHeader::cm(attr_id, tid).emit(&mut mad[..]);
        let _ = emit(&mut mad[MAD_HEADER_LEN..]);
        mad
    }

    fn push(&mut self, dest: Gid, mad: Box<[u8; MAD_LEN]>) {
        self.stats.sent += 1;
        self.out.push_back((dest, *mad));
    }

    /// Sends the connection's `last` MAD and times its answer.
    fn send_timed(&mut self, now: Nanos, id: u32) {
        if let Some(c) = self.conns.get(&id) {
            let (peer, mad, at) = (c.peer, c.last.clone(), now + c.timeout);
            self.push(peer, mad);
            self.set_timer(id, at);
        }
    }

    fn set_timer(&mut self, id: u32, at: Nanos) {
        self.stop_timer(id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.deadline = Some(at);
            self.timers.insert((at, id));
        }
    }

    fn stop_timer(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if let Some(at) = c.deadline.take() {
                self.timers.remove(&(at, id));
            }
        }
    }

    fn set_state(&mut self, id: u32, state: State) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = state;
        }
    }

    /// Hands up an event, unless the user destroyed the connection.
    fn event(&mut self, id: u32, kind: CmEventKind) {
        if self.conns.get(&id).is_some_and(|c| !c.detached) {
            self.events.push_back(CmEvent { id: CmId(id), kind });
        }
    }

    /// Hands up DISCONNECTED, once per connection.
    fn disconnected(&mut self, id: u32, timed_out: bool) {
        if let Some(c) = self.conns.get_mut(&id) {
            if !std::mem::replace(&mut c.disconnected, true) {
                self.event(id, CmEventKind::Disconnected { timed_out });
            }
        }
    }

    /// A passive request was answered: it no longer counts against the backlog.
    fn answered(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(sid) = c.pending_on.take() {
            if let Some(l) = self.listeners.get_mut(&sid) {
                l.pending = l.pending.saturating_sub(1);
            }
            if let Some(p) = self.peers.get_mut(&c.peer) {
                p.pending = p.pending.saturating_sub(1);
            }
        }
    }

    /// Whether a new request from `peer` stays within its limits: else why not.
    fn peer_admits(&self, peer: Gid) -> Result<(), CmDrop> {
        let p = self.peers.get(&peer).copied().unwrap_or_default();
        if p.pending >= self.config.pending_per_peer {
            Err(CmDrop::PeerPending)
        } else if p.live >= self.config.conns_per_peer {
            Err(CmDrop::PeerConnections)
        } else {
            Ok(())
        }
    }

    /// A passive connection from `peer`, unanswered, now counts against its limits.
    fn peer_counts(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.counted = true;
            let p = self.peers.entry(c.peer).or_default();
            p.live += 1;
            p.pending += u32::from(c.pending_on.is_some());
        }
    }

    /// The connection `id` no longer counts against its peer's live connections.
    fn peer_release(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if !std::mem::take(&mut c.counted) {
            return;
        }
        if let Some(p) = self.peers.get_mut(&c.peer) {
            p.live = p.live.saturating_sub(1);
            if p.live == 0 {
                self.peers.remove(&c.peer);
            }
        }
    }

    fn enter_timewait(&mut self, now: Nanos, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.state == State::TimeWait {
            return;
        }
        c.state = State::TimeWait;
        let at = now + iba_time(c.ack_timeout);
        self.peer_release(id);
        self.timewait += 1;
        if self.timewait > MAX_TIMEWAIT {
            // Bounded: end the oldest timewait now (Linux bounds it by memory).
            if let Some(&(_, old)) = self.timers.iter().find(|(_, i)| {
                self.conns
                    .get(i)
                    .is_some_and(|c| c.state == State::TimeWait && *i != id)
            }) {
                self.remove(old);
            }
        }
        self.set_timer(id, at);
    }

    fn remove(&mut self, id: u32) {
        self.answered(id);
        self.peer_release(id);
        self.stop_timer(id);
        if let Some(c) = self.conns.remove(&id) {
            if c.state == State::TimeWait {
                self.timewait -= 1;
            }
            if self.by_remote.get(&(c.peer, c.remote_id)) == Some(&id) {
                self.by_remote.remove(&(c.peer, c.remote_id));
            }
        }
    }

    /// Sends a REJ on the connection `id` (`rejected`: 0 REQ, 1 REP, 2 other), with up to
    /// 72 bytes of additional rejection information.
    fn send_rej(&mut self, id: u32, reason: u16, rejected: u8, ari: &[u8], data: &[u8]) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let mut rej = Rej {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message_rejected: rejected,
            ari_length: ari.len().min(72) as u8,
            reason,
            ari: [0; 72],
            private_data: [0; Rej::PRIVATE_DATA],
        };
        rej.ari[..usize::from(rej.ari_length)].copy_from_slice(&ari[..usize::from(rej.ari_length)]);
        let n = data.len().min(Rej::PRIVATE_DATA);
        rej.private_data[..n].copy_from_slice(&data[..n]);
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.build(attr::REJ, tid, |d| rej.emit(d));
        self.push(peer, mad);
    }

    fn send_drep(&mut self, id: u32) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let ids = CommIds {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            extra: 0,
            private_data: [0; CommIds::PRIVATE_DATA],
        };
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.build(attr::DREP, tid, |d| ids.emit(attr::DREP, d));
        if let Some(c) = self.conns.get_mut(&id) {
            c.last = mad.clone();
        }
        self.push(peer, mad);
    }
}
