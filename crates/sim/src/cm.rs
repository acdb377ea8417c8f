//! Connection-manager scenarios: two engines' CMs set up and tear down connections over
//! the simulated network while the test loses, repeats or holds chosen MADs, and every
//! event each side hands up is logged for the invariants.

use crate::{NetConfig, Tap, TapAction, World};
use oxrdma_core::cm::{AcceptParams, CmEvent, CmEventKind, CmId, CmTransport, ConnectParams};
use oxrdma_core::{Gid, Mtu, Nanos};
use oxrdma_wire::mad::MadHeader;
use oxrdma_wire::PacketRepr;

/// A second of virtual time.
pub const SEC: Nanos = 1_000_000_000;

/// The CM attribute ID of a datagram to QP1, if it is one.
pub fn cm_attr(data: &[u8]) -> Option<u16> {
    let p = PacketRepr::parse(data).ok()?;
    (p.bth.dest_qpn == 1).then_some(())?;
    MadHeader::parse(p.payload).ok().map(|h| h.attr_id)
}

/// A tap that applies `action` to the first `times` MADs of attribute `attr`.
pub fn tap_first(attr: u16, times: usize, action: TapAction) -> Tap {
    let mut left = times;
    Tap(Box::new(move |d| {
        if left > 0 && cm_attr(&d.data) == Some(attr) {
            left -= 1;
            return action;
        }
        TapAction::Pass
    }))
}

/// A REQ's parameters for an RC QP `qpn` of `source`, to `dest`'s service `sid`.
pub fn rc_params(source: Gid, dest: Gid, sid: u64, qpn: u32) -> ConnectParams {
    ConnectParams {
        dest,
        source,
        service_id: sid,
        transport: CmTransport::Rc,
        qpn,
        starting_psn: 0x6f3396,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        path_mtu: Mtu::Mtu1024,
        flow_label: 0x332a4,
        traffic_class: 0,
        hop_limit: 64,
        ack_timeout: 19,
        private_data: vec![0xa5; 56],
    }
}

/// The REP's parameters for an RC QP `qpn`.
pub fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        qpn,
        starting_psn: 0xd17464,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![0x5a; 10],
    }
}

/// Nodes (two unless made `with_nodes`) and the events their CMs handed up, by node, in
/// order, with the time.
#[derive(Debug)]
pub struct CmWorld {
    pub world: World,
    pub log: Vec<Vec<(Nanos, CmEvent)>>,
}

impl CmWorld {
    pub fn new(net: NetConfig, seed: u64) -> CmWorld {
        CmWorld::with_nodes(2, net, seed)
    }

    pub fn with_nodes(n: usize, net: NetConfig, seed: u64) -> CmWorld {
        CmWorld {
            world: World::new(n, net, seed),
            log: vec![Vec::new(); n],
        }
    }

    pub fn gid(&self, node: usize) -> Gid {
        Gid::from(self.world.nodes[node].ip)
    }

    /// Node `n` listens on `sid`.
    pub fn listen(&mut self, n: usize, sid: u64, backlog: usize) {
        self.world.nodes[n]
            .engine
            .cm_mut()
            .listen(sid, backlog)
            .unwrap();
    }

    /// Node `n` connects to the other node's `sid` at time `at`, for its QP `qpn`.
    pub fn connect(&mut self, n: usize, at: Nanos, sid: u64, qpn: u32) -> CmId {
        self.connect_to(n, 1 - n, at, sid, qpn)
    }

    /// Node `n` connects to node `to`'s `sid` at time `at`, for its QP `qpn`.
    pub fn connect_to(&mut self, n: usize, to: usize, at: Nanos, sid: u64, qpn: u32) -> CmId {
        let (source, dest) = (self.gid(n), self.gid(to));
        self.world.nodes[n]
            .engine
            .cm_mut()
            .connect(at, &rc_params(source, dest, sid, qpn))
            .unwrap()
    }

    /// Runs until `until`, handing each event to `react(world, node, event)` as it comes.
    pub fn run(&mut self, until: Nanos, mut react: impl FnMut(&mut World, usize, &CmEvent)) {
        loop {
            for n in 0..self.log.len() {
                while let Some(e) = self.world.nodes[n].engine.poll_cm_event() {
                    react(&mut self.world, n, &e);
                    self.log[n].push((self.world.now, e));
                }
            }
            if !self.world.step(until) {
                break;
            }
        }
    }

    /// The kinds of the events node `n` got for `id`, by name.
    pub fn kinds(&self, n: usize, id: CmId) -> Vec<&'static str> {
        self.log[n]
            .iter()
            .filter(|(_, e)| e.id == id)
            .map(|(_, e)| name(&e.kind))
            .collect()
    }

    /// The connections node `n` heard of, in order of their first event.
    pub fn ids(&self, n: usize) -> Vec<CmId> {
        let mut ids = Vec::new();
        for (_, e) in &self.log[n] {
            if !ids.contains(&e.id) {
                ids.push(e.id);
            }
        }
        ids
    }
}

pub fn name(k: &CmEventKind) -> &'static str {
    match k {
        CmEventKind::ConnectRequest { .. } => "request",
        CmEventKind::Reply { .. } => "reply",
        CmEventKind::Established => "established",
        CmEventKind::Rejected { .. } => "rejected",
        CmEventKind::Unreachable => "unreachable",
        CmEventKind::Disconnected { .. } => "disconnected",
        CmEventKind::TimewaitExit => "timewait-exit",
        CmEventKind::SidrRequest { .. } => "sidr-request",
        CmEventKind::SidrReply { .. } => "sidr-reply",
    }
}

/// The usual life of a connection: node 1 listens on `sid` and accepts, node 0 connects,
/// establishes on the REP, and disconnects `hold` after that; node 1 answers the DREQ.
/// Returns node 0's connection.
pub fn connect_and_disconnect(w: &mut CmWorld, sid: u64, hold: Nanos, until: Nanos) -> CmId {
    let (source, dest) = (w.gid(0), w.gid(1));
    w.world.nodes[1].engine.cm_mut().listen(sid, 16).unwrap();
    let now = w.world.now;
    let id = w.world.nodes[0]
        .engine
        .cm_mut()
        .connect(now, &rc_params(source, dest, sid, 0x1e))
        .unwrap();
    let disconnect_at = std::cell::Cell::new(None);
    let mut react = |world: &mut World, n: usize, e: &CmEvent| {
        let now = world.now;
        let cm = world.nodes[n].engine.cm_mut();
        match (&e.kind, n) {
            (CmEventKind::ConnectRequest { .. }, 1) => {
                cm.accept(now, e.id, &accept_params(0x1e)).unwrap();
            }
            (CmEventKind::Reply { .. }, 0) => {
                cm.establish(e.id).unwrap();
                disconnect_at.set(Some(now + hold));
            }
            (CmEventKind::Disconnected { .. }, _) => {
                // Answers a DREQ; after our own DREQ's end it is refused, which is fine.
                let _ = cm.disconnect(now, e.id);
            }
            _ => {}
        }
    };
    // In slices of 100 ms, so the disconnect goes out when it is due.
    while w.world.now < until {
        let next = (w.world.now + SEC / 10).min(until);
        w.run(next, &mut react);
        w.world.now = next;
        if disconnect_at.get().is_some_and(|at| at <= next) {
            disconnect_at.set(None);
            w.world.nodes[0]
                .engine
                .cm_mut()
                .disconnect(next, id)
                .unwrap();
        }
    }
    id
}
