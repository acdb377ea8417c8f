//! ReDMArk's A4 against the connection manager, in the simulator: one peer that asks for
//! connections without end gets no more than its limits (`PeerLimits`) of a device's
//! pending requests and connections, and another peer still connects. Every refusal is
//! counted.

use oxrdma_core::cm::{CmEvent, CmEventKind};
use oxrdma_core::Counter;
use oxrdma_sim::cm::{accept_params, CmWorld, SEC};
use oxrdma_sim::{NetConfig, World};
use oxrdma_wire::cm::Rej;

const SID: u64 = 0x0000_0000_0106_4a04;
/// Node 1 listens; node 0 floods it; node 2 is the peer with a fair claim.
const ATTACKER: usize = 0;
const SERVER: usize = 1;
const OTHER: usize = 2;

fn world(seed: u64, pending: u32, conns: u32) -> CmWorld {
    let mut w = CmWorld::with_nodes(3, NetConfig::default(), seed);
    w.world.reconfigure(SERVER, |c| {
        c.peer_limits.cm_pending_per_peer = pending;
        c.peer_limits.cm_conns_per_peer = conns;
    });
    w.listen(SERVER, SID, 1024);
    w
}

fn counter(w: &CmWorld, c: Counter) -> u64 {
    w.world.nodes[SERVER].engine.counters()[c]
}

/// The requests `n` was handed, by the peer's node.
fn requests_from(w: &CmWorld, peer: usize) -> usize {
    let gid = w.gid(peer);
    w.log[SERVER]
        .iter()
        .filter(
            |(_, e)| matches!(&e.kind, CmEventKind::ConnectRequest { peer: p, .. } if *p == gid),
        )
        .count()
}

/// Accepts every request (as a server that makes a QP per connection), establishes on
/// every REP, and answers a disconnect with its own (as `rdma_disconnect` after
/// RDMA_CM_EVENT_DISCONNECTED).
fn accept_all(world: &mut World, n: usize, e: &CmEvent) {
    let now = world.now;
    let cm = world.nodes[n].engine.cm_mut();
    match e.kind {
        CmEventKind::ConnectRequest { .. } => cm.accept(0, e.id, &accept_params(0x40)).unwrap(),
        CmEventKind::Reply { .. } => cm.establish(e.id).unwrap(),
        CmEventKind::Disconnected { .. } => {
            let _ = cm.disconnect(now, e.id);
        }
        _ => {}
    }
}

#[test]
fn one_peers_unanswered_requests_leave_the_backlog_to_others() {
    let mut w = world(41, 16, 4096);
    for qpn in 0..500 {
        w.connect_to(ATTACKER, SERVER, 0, SID, qpn);
    }
    // The server's application is busy: it answers nothing.
    w.run(SEC, |_, _, _| {});
    w.connect_to(OTHER, SERVER, w.world.now, SID, 7);
    w.run(2 * SEC, |_, _, _| {});
    assert_eq!(
        requests_from(&w, ATTACKER),
        16,
        "the attacker's pending limit"
    );
    assert_eq!(requests_from(&w, OTHER), 1, "the other peer is heard");
    assert_eq!(counter(&w, Counter::CmPeerLimited), 484);
    assert_eq!(
        counter(&w, Counter::Mad),
        484,
        "each counted as a dropped MAD"
    );
    assert_eq!(counter(&w, Counter::CmBacklogFull), 0);
}

#[test]
fn one_peer_gets_no_more_connections_than_its_limit_and_timewait_frees_them() {
    let mut w = world(42, 256, 8);
    let ids: Vec<_> = (0..20)
        .map(|qpn| w.connect_to(ATTACKER, SERVER, 0, SID, qpn))
        .collect();
    w.run(SEC, accept_all);
    let outcome = |w: &CmWorld, id| {
        w.log[ATTACKER]
            .iter()
            .filter(|(_, e)| e.id == id)
            .map(|(_, e)| match &e.kind {
                CmEventKind::Reply { .. } => "reply".to_string(),
                CmEventKind::Rejected { reason, .. } => format!("rejected {reason}"),
                k => oxrdma_sim::cm::name(k).to_string(),
            })
            .collect::<Vec<_>>()
    };
    let replies = ids
        .iter()
        .filter(|&&id| outcome(&w, id) == ["reply"])
        .count();
    let refused = ids
        .iter()
        .filter(|&&id| outcome(&w, id) == [format!("rejected {}", Rej::NO_RESOURCES)])
        .count();
    assert_eq!(
        (replies, refused),
        (8, 12),
        "{:?}",
        ids.iter().map(|&i| outcome(&w, i)).collect::<Vec<_>>()
    );
    assert_eq!(counter(&w, Counter::CmPeerLimited), 12);
    // Another peer is not held to the attacker's count.
    let other = w.connect_to(OTHER, SERVER, w.world.now, SID, 9);
    w.run(2 * SEC, accept_all);
    assert!(
        w.log[OTHER]
            .iter()
            .any(|(_, e)| e.id == other && matches!(e.kind, CmEventKind::Reply { .. })),
        "the other peer connects"
    );
    // A connection that ends no longer counts, from its timewait on.
    let first = *ids
        .iter()
        .find(|&&id| outcome(&w, id) == ["reply"])
        .unwrap();
    let now = w.world.now;
    w.world.nodes[ATTACKER]
        .engine
        .cm_mut()
        .disconnect(now, first)
        .unwrap();
    w.run(3 * SEC, accept_all);
    let again = w.connect_to(ATTACKER, SERVER, w.world.now, SID, 100);
    w.run(4 * SEC, accept_all);
    assert_eq!(outcome(&w, again), ["reply"]);
    assert_eq!(counter(&w, Counter::CmPeerLimited), 12);
}
