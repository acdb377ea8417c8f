//! The connection manager over the simulated network: every CM message lost, repeated or
//! held past its timeout still gives each side exactly one outcome; random loss,
//! duplication and reordering over many seeds; rejections, timeouts, backlogs, SIDR and
//! bad MADs. Each failure names its seed.

use oxrdma_core::cm::{CmEventKind, CmId, SidrReplyParams};
use oxrdma_sim::cm::{connect_and_disconnect, tap_first, CmWorld, SEC};
use oxrdma_sim::{NetConfig, TapAction};
use oxrdma_wire::cm::attr;
use oxrdma_wire::cma;

const SID: u64 = 0x0000_0000_0106_1c06;

/// A clean life on both sides: node 0 got its REP, disconnected and left timewait; node 1
/// took one request, at most one established (a DREQ may overtake a lost RTU), one
/// disconnect and one timewait exit; both CMs hold nothing afterwards.
fn check_clean(w: &CmWorld, active: CmId, must_establish: bool, what: &str) -> bool {
    assert_eq!(
        w.kinds(0, active),
        ["reply", "disconnected", "timewait-exit"],
        "{what}: node 0"
    );
    let passive = w.ids(1);
    assert_eq!(passive.len(), 1, "{what}: node 1 heard of {passive:?}");
    let k = w.kinds(1, passive[0]);
    let expected: &[&[&str]] = &[
        &["request", "established", "disconnected", "timewait-exit"],
        &["request", "disconnected", "timewait-exit"],
    ];
    assert!(
        expected[..if must_establish { 1 } else { 2 }].contains(&k.as_slice()),
        "{what}: node 1 {k:?}"
    );
    for n in 0..2 {
        let cm = w.world.nodes[n].engine.cm();
        assert_eq!(
            cm.connections(),
            0,
            "{what}: node {n} still holds a connection"
        );
        assert_eq!(
            cm.poll_timeout(),
            None,
            "{what}: node {n} still has a timer"
        );
    }
    k.len() == 4
}

/// Accepts every request and establishes on every REP.
fn accept_and_establish(world: &mut oxrdma_sim::World, n: usize, e: &oxrdma_core::cm::CmEvent) {
    let cm = world.nodes[n].engine.cm_mut();
    match e.kind {
        CmEventKind::ConnectRequest { .. } => cm
            .accept(0, e.id, &oxrdma_sim::cm::accept_params(0x20))
            .unwrap(),
        CmEventKind::Reply { .. } => cm.establish(e.id).unwrap(),
        _ => {}
    }
}

#[test]
fn each_message_lost_repeated_or_held_past_its_timeout_still_connects_once() {
    let held = TapAction::Delay(7 * SEC); // past every CM timeout (REQ 6.1 s, REP 4.1 s)
    for a in [attr::REQ, attr::REP, attr::RTU, attr::DREQ, attr::DREP] {
        for (times, action) in [
            (1, TapAction::Drop),
            (3, TapAction::Drop),
            (2, TapAction::Duplicate),
            (1, held),
        ] {
            let what = format!("attr {a:#x} x{times} {action:?}");
            let mut w = CmWorld::new(NetConfig::default(), 1);
            w.world.tap = Some(tap_first(a, times, action));
            // Held 20 s after the REP, so lost RTUs (REP resent every 4 s) are made good first.
            let id = connect_and_disconnect(&mut w, SID, 20 * SEC, 400 * SEC);
            check_clean(&w, id, true, &what);
        }
    }
}

#[test]
fn random_loss_duplication_and_reordering_over_many_seeds() {
    let scale = oxrdma_sim::scale();
    let (mut runs, mut established, mut lost) = (0, 0, 0);
    for seed in 0..300 * scale {
        let net = NetConfig {
            loss: (seed % 7) as f64 * 0.05, // 0-30 %
            duplicate: 0.05,
            reorder: 0.1,
            jitter: (seed % 5) * SEC, // up to 4 s: messages overtake and outlive timeouts
            ..NetConfig::default()
        };
        let mut w = CmWorld::new(net, seed);
        let id = connect_and_disconnect(&mut w, SID, SEC / 2, 600 * SEC);
        runs += 1;
        established += u32::from(check_clean(&w, id, false, &format!("seed {seed}")));
        lost += w.world.net.stats.lost;
    }
    // A DREQ overtakes a lost RTU now and then; most connections see ESTABLISHED.
    assert!(
        established * 10 > runs * 8,
        "{established} of {runs} established"
    );
    assert!(lost > 100, "the network lost {lost} packets in all");
}

#[test]
fn nobody_listening_is_rejected_with_invalid_service_id() {
    let mut w = CmWorld::new(NetConfig::default(), 2);
    let id = w.connect(0, 0, SID, 0x11);
    w.run(SEC, |_, _, _| {});
    assert_eq!(w.kinds(0, id), ["rejected"]);
    let CmEventKind::Rejected { reason, .. } = &w.log[0][0].1.kind else {
        unreachable!()
    };
    assert_eq!(*reason, 8);
    // Asked again for the listen grace (100 ms), then given up.
    let at = w.log[0][0].0;
    assert!(
        (100_000_000..120_000_000).contains(&at),
        "rejected at {at} ns"
    );
    assert!(w.log[1].is_empty());
    assert_eq!(w.world.nodes[0].engine.cm_mut().connections(), 0);
}

#[test]
fn a_listener_that_appears_within_the_grace_takes_the_connection() {
    // perftest -R's server listens again between its two connections: a REQ that came
    // in the gap was refused (REJ 8), and goes again.
    let mut w = CmWorld::new(NetConfig::default(), 12);
    let id = w.connect(0, 0, SID, 0x11);
    w.run(SEC / 20, |_, _, _| {});
    assert!(w.log[0].is_empty(), "nothing handed up yet: {:?}", w.log[0]);
    w.listen(1, SID, 4);
    w.run(SEC, accept_and_establish);
    assert_eq!(w.kinds(0, id), ["reply"]);
    let passive = w.ids(1)[0];
    assert_eq!(w.kinds(1, passive), ["request", "established"]);
}

#[test]
fn a_reject_carries_reason_28_and_its_private_data() {
    let mut w = CmWorld::new(NetConfig::default(), 3);
    w.listen(1, SID, 4);
    let id = w.connect(0, 0, SID, 0x11);
    w.run(SEC, |world, n, e| {
        if n == 1 {
            world.nodes[1]
                .engine
                .cm_mut()
                .reject(e.id, b"go away")
                .unwrap();
        }
    });
    assert_eq!(w.kinds(0, id), ["rejected"]);
    let CmEventKind::Rejected {
        reason,
        private_data,
    } = &w.log[0][0].1.kind
    else {
        unreachable!()
    };
    assert_eq!((*reason, &private_data[..7]), (28, &b"go away"[..]));
    assert_eq!(private_data.len(), 148);
    for n in 0..2 {
        assert_eq!(w.world.nodes[n].engine.cm_mut().connections(), 0);
    }
}

#[test]
fn a_peer_that_never_answers_is_unreachable_after_15_resends() {
    let net = NetConfig {
        loss: 1.0,
        ..NetConfig::default()
    };
    let mut w = CmWorld::new(net, 4);
    let id = w.connect(0, 0, SID, 0x11);
    w.run(200 * SEC, |_, _, _| {});
    assert_eq!(w.kinds(0, id), ["unreachable"]);
    let at = w.log[0][0].0;
    // 16 REQs, 6.144 s apart: Linux's 98 s.
    assert_eq!(at, 16 * 6_144_000_000);
    assert_eq!(w.world.nodes[0].engine.cm_mut().stats().sent, 16);
}

#[test]
fn a_repeated_req_is_answered_with_an_mra_that_holds_off_the_resend() {
    // Node 1 sits on the request (no accept): node 0's REQ times out and goes again; the
    // repeat gets an MRA, so node 0 waits the MRA's 69 s instead of resending every 6 s.
    let mut w = CmWorld::new(NetConfig::default(), 5);
    w.listen(1, SID, 4);
    w.connect(0, 0, SID, 0x11);
    w.run(60 * SEC, |_, _, _| {});
    let sent = w.world.nodes[0].engine.cm_mut().stats().sent;
    assert_eq!(sent, 2, "one REQ, one repeat, then the MRA holds it off");
    assert_eq!(w.world.nodes[1].engine.cm_mut().stats().sent, 1, "one MRA");
    assert_eq!(w.ids(1).len(), 1, "the repeat is not a second request");
}

#[test]
fn a_flood_of_requests_is_bounded_by_the_backlog() {
    let mut w = CmWorld::new(NetConfig::default(), 6);
    w.listen(1, SID, 8);
    for qpn in 0..1000 {
        w.connect(0, 0, SID, qpn);
    }
    w.run(SEC, |_, _, _| {});
    assert_eq!(w.ids(1).len(), 8, "only the backlog is handed up");
    assert_eq!(w.world.nodes[1].engine.cm_mut().connections(), 8);
    assert_eq!(
        w.world.nodes[1]
            .engine
            .stats()
            .rx_drops
            .get(oxrdma_core::RxDrop::Mad),
        992
    );
}

#[test]
fn destroying_a_connection_that_waits_for_its_rep_rejects_with_timeout_and_the_guid() {
    let mut w = CmWorld::new(NetConfig::default(), 7);
    w.listen(1, SID, 4);
    let id = w.connect(0, 0, SID, 0x11);
    w.run(SEC, |_, _, _| {}); // node 1 holds the request unanswered
    let rejects = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = rejects.clone();
    w.world.tap = Some(oxrdma_sim::Tap(Box::new(move |d| {
        if oxrdma_sim::cm::cm_attr(&d.data) == Some(attr::REJ) {
            seen.borrow_mut().push(d.data.clone());
        }
        TapAction::Pass
    })));
    w.world.nodes[0].engine.cm_mut().destroy(SEC, id);
    w.run(2 * SEC, |_, _, _| {});
    assert_eq!(rejects.borrow().len(), 1);
    let data = rejects.borrow()[0].clone();
    let pkt = oxrdma_wire::PacketRepr::parse(&data).unwrap();
    let rej = oxrdma_wire::cm::Rej::parse(&pkt.payload[24..]).unwrap();
    assert_eq!(
        (rej.reason, rej.message_rejected, rej.ari_length),
        (4, 2, 8)
    );
    let guid = w.world.nodes[0].engine.cm_mut().config().guid;
    assert_eq!(rej.ari[..8], guid.to_be_bytes());
    // Node 1's request ends with the REJ: it hears "rejected" and holds nothing.
    let passive = w.ids(1)[0];
    assert_eq!(w.kinds(1, passive), ["request", "rejected"]);
    assert_eq!(w.world.nodes[1].engine.cm_mut().connections(), 0);
    assert!(w.kinds(0, id).is_empty(), "a destroyed id hears nothing");
}

#[test]
fn simultaneous_connects_each_way_make_two_connections() {
    let mut w = CmWorld::new(NetConfig::default(), 8);
    for n in 0..2 {
        w.world.nodes[n].engine.cm_mut().listen(SID, 4).unwrap();
    }
    let a = w.connect(0, 0, SID, 0x11);
    let b = w.connect(1, 0, SID, 0x12);
    w.run(SEC, accept_and_establish);
    assert_eq!(w.kinds(0, a), ["reply"]);
    assert_eq!(w.kinds(1, b), ["reply"]);
    for n in 0..2 {
        let other = w.ids(n).into_iter().find(|i| *i != [a, b][n]).unwrap();
        assert_eq!(w.kinds(n, other), ["request", "established"]);
    }
}

#[test]
fn a_listener_that_went_away_rejects_new_requests_but_keeps_the_pending_one() {
    let mut w = CmWorld::new(NetConfig::default(), 9);
    w.listen(1, SID, 4);
    let first = w.connect(0, 0, SID, 0x11);
    w.run(SEC, |_, _, _| {});
    w.world.nodes[1].engine.cm_mut().unlisten(SID);
    let second = w.connect(0, SEC, SID, 0x12);
    let pending = w.ids(1)[0];
    w.world.nodes[1]
        .engine
        .cm_mut()
        .accept(SEC, pending, &oxrdma_sim::cm::accept_params(0x30))
        .unwrap();
    w.run(2 * SEC, |world, n, e| {
        if let (0, CmEventKind::Reply { .. }) = (n, &e.kind) {
            world.nodes[0].engine.cm_mut().establish(e.id).unwrap();
        }
    });
    assert_eq!(w.kinds(0, first), ["reply"]);
    assert_eq!(w.kinds(1, pending), ["request", "established"]);
    assert_eq!(w.kinds(0, second), ["rejected"]);
}

#[test]
fn sidr_resolves_a_listened_service_and_reports_an_unknown_one() {
    let mut w = CmWorld::new(NetConfig::default(), 10);
    let dest = w.gid(1);
    let udp = cma::service_id(cma::PS_UDP, 7471);
    w.world.nodes[1].engine.cm_mut().listen(udp, 4).unwrap();
    let known = w.world.nodes[0]
        .engine
        .cm_mut()
        .sidr_request(0, dest, udp, b"hello")
        .unwrap();
    let unknown = w.world.nodes[0]
        .engine
        .cm_mut()
        .sidr_request(0, dest, udp + 1, b"")
        .unwrap();
    w.run(SEC, |world, n, e| {
        if let (1, CmEventKind::SidrRequest { req, .. }) = (n, &e.kind) {
            assert_eq!(&req.private_data[..5], b"hello");
            let reply = SidrReplyParams {
                status: 0,
                qpn: 0x44,
                qkey: 0x0123_4567,
                private_data: vec![1, 2, 3],
            };
            world.nodes[1]
                .engine
                .cm_mut()
                .sidr_reply(e.id, &reply)
                .unwrap();
        }
    });
    let reply = |id| {
        w.log[0].iter().find_map(|(_, e)| match &e.kind {
            CmEventKind::SidrReply { rep } if e.id == id => Some(rep.clone()),
            _ => None,
        })
    };
    let ok = reply(known).expect("a reply to the known service");
    assert_eq!((ok.status, ok.qpn, ok.qkey), (0, 0x44, 0x0123_4567));
    assert_eq!(&ok.private_data[..3], &[1, 2, 3]);
    assert_eq!(
        reply(unknown).expect("a reply to the unknown one").status,
        1
    );
    for n in 0..2 {
        assert_eq!(w.world.nodes[n].engine.cm_mut().connections(), 0);
    }
}

#[test]
fn malformed_and_unexpected_mads_are_counted_and_change_nothing() {
    use rand::{RngCore, SeedableRng};
    let mut w = CmWorld::new(NetConfig::default(), 11);
    let src = w.gid(0);
    w.listen(1, SID, 4);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let cm = w.world.nodes[1].engine.cm_mut();
    for i in 0..20_000u32 {
        let mut mad = [0u8; 256];
        rng.fill_bytes(&mut mad);
        // Half of them look like CM Send MADs of a real attribute, to reach the handlers.
        if i % 2 == 0 {
            mad[..4].copy_from_slice(&[1, 7, 2, 3]);
            mad[16..18].copy_from_slice(&(0x10 + (i % 11) as u16).to_be_bytes());
            // Never a REQ for the listened service (that would be a real request).
            mad[32..40].copy_from_slice(&0xdead_u64.to_be_bytes());
        }
        let _ = cm.handle_mad(0, src, &mad[..(i as usize % 257)]);
    }
    assert_eq!(cm.connections(), 0, "no random MAD made a connection");
    assert!(cm.poll_event().is_none());
    assert!(cm.stats().ignored > 10_000);
}
