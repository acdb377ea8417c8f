//! The counters (`oxrdma_core::Counter`), each provoked on purpose between two simulated
//! hosts: each moves on the side it belongs to, by as much as happened, and the device's
//! sums agree with its QPs'.

use oxrdma_core::{Access, Counter, Counters, SendData, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::{Pair, PairOptions, Tap, TapAction};
use oxrdma_wire::{Opcode, PacketRepr};

fn write(p: &Pair, wr_id: u64, len: usize, remote: u64, rkey: u32) -> SendWr {
    let mut wr = SendWr::new(
        wr_id,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![p.a.sge(0, len)].into()),
    );
    (wr.remote_addr, wr.rkey) = (remote, rkey);
    wr
}

/// Node `n`'s device counters, and its QP's.
fn counters(p: &Pair, n: usize) -> (Counters, Counters) {
    let e = &p.world.nodes[n].engine;
    let qpn = if n == 0 { p.a.qpn } else { p.b.qpn };
    (e.counters(), e.qp_counters(qpn).unwrap())
}

/// What moved, as (name, count) pairs, for the assertion messages.
fn nonzero(c: &Counters) -> Vec<(&'static str, u64)> {
    c.iter()
        .filter(|&(_, n)| n > 0)
        .map(|(c, n)| (c.name(), n))
        .collect()
}

#[test]
fn traffic_is_counted_by_class_both_ways_and_the_device_agrees_with_its_qp() {
    let mut p = Pair::new(&PairOptions::default());
    let wr = write(&p, 1, 10_000, p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, wr);
    let mut r = SendWr::new(
        2,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![p.a.sge(0, 5_000)].into()),
    );
    (r.remote_addr, r.rkey) = (p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, r);
    p.run();
    let (a, qa) = counters(&p, 0);
    let (b, qb) = counters(&p, 1);
    // 10 WRITE packets at MTU 1024, one READ request, 5 response packets.
    assert_eq!(a[Counter::SentWrite], 10, "{:?}", nonzero(&a));
    assert_eq!(b[Counter::RcvdWrite], 10, "{:?}", nonzero(&b));
    assert_eq!(a[Counter::SentReadRequest], 1);
    assert_eq!(b[Counter::SentReadResponse], 5);
    assert_eq!(a[Counter::RcvdReadResponse], 5);
    // Nothing lost: what one sent, the other received, packets and bytes.
    assert_eq!(a[Counter::SentPkts], b[Counter::RcvdPkts]);
    assert_eq!(b[Counter::SentPkts], a[Counter::RcvdPkts]);
    assert_eq!(a[Counter::SentBytes], b[Counter::RcvdBytes]);
    assert!(a[Counter::SentBytes] > 10_000 && b[Counter::SentBytes] > 5_000);
    assert_eq!(
        a[Counter::SentPkts],
        a[Counter::SentWrite] + a[Counter::SentReadRequest] + a[Counter::SentAck]
    );
    // One QP each: its traffic is the device's.
    for c in [Counter::SentPkts, Counter::RcvdPkts, Counter::SentBytes] {
        assert_eq!((qa[c], qb[c]), (a[c], b[c]), "{}", c.name());
    }
    assert_eq!(a[Counter::Retransmitted] + b[Counter::DuplicateRequest], 0);
}

#[test]
fn remote_access_errors_are_counted_by_cause_on_both_sides() {
    // A bad rkey, an access past the region, a READ of a region that allows none.
    let cases = [
        ("resp_bad_rkey", Counter::BadRkey),
        ("resp_out_of_bounds", Counter::OutOfBounds),
        ("resp_access_denied", Counter::AccessDenied),
    ];
    for (i, (name, cause)) in cases.into_iter().enumerate() {
        let mut p = Pair::new(&PairOptions {
            mr_access: if i == 2 {
                Access::LOCAL_WRITE | Access::REMOTE_WRITE
            } else {
                Access::ALL
            },
            ..PairOptions::default()
        });
        let (addr, rkey, len) = match i {
            0 => (p.b.addr(0), p.b.mr.rkey ^ 0x55, 64),
            1 => (p.b.addr((1 << 20) - 16), p.b.mr.rkey, 64),
            _ => (p.b.addr(0), p.b.mr.rkey, 64),
        };
        let mut wr = write(&p, 1, len, addr, rkey);
        if i == 2 {
            wr.opcode = WrOpcode::RdmaRead;
        }
        p.post_send(0, wr);
        p.run();
        let wc = p.wcs(0);
        assert_eq!(wc[0].status, WcStatus::RemAccessErr, "{name}: {wc:?}");
        let (a, _) = counters(&p, 0);
        let (b, qb) = counters(&p, 1);
        assert_eq!(
            a[Counter::ReqRemoteAccessErrors],
            1,
            "{name}: {:?}",
            nonzero(&a)
        );
        assert_eq!(
            b[Counter::RespRemoteAccessErrors],
            1,
            "{name}: {:?}",
            nonzero(&b)
        );
        assert_eq!(b[cause], 1, "{name}: {:?}", nonzero(&b));
        let causes = b[Counter::BadRkey] + b[Counter::OutOfBounds] + b[Counter::AccessDenied];
        assert_eq!(causes, 1, "{name}: one cause");
        assert_eq!(qb[cause], 1, "{name}: the QP's too");
    }
}

#[test]
fn rnr_naks_are_counted_each_way_and_their_end() {
    let mut p = Pair::new(&PairOptions {
        rnr_retry: 2,
        ..PairOptions::default()
    });
    p.post_send(
        0,
        SendWr::new(
            1,
            WrOpcode::Send,
            SendData::Sges(vec![p.a.sge(0, 8)].into()),
        ),
    );
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RnrRetryExcErr);
    let (a, _) = counters(&p, 0);
    let (b, _) = counters(&p, 1);
    // The first try and two retries, each NAKed.
    assert_eq!(b[Counter::SendRnrErr], 3, "{:?}", nonzero(&b));
    assert_eq!(a[Counter::RcvdRnrErr], 3, "{:?}", nonzero(&a));
    assert_eq!(a[Counter::RnrRetryExceeded], 1);
    assert_eq!(b[Counter::SentAck], 3);
}

/// Drops the packets of node `from` whose opcode `pick` chooses, each once by its PSN.
fn drop_once(p: &mut Pair, from: usize, pick: impl Fn(Opcode) -> bool + 'static) {
    let mut dropped = std::collections::HashSet::new();
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        if d.from == from && pick(pkt.bth.opcode) && dropped.insert(pkt.bth.psn.value()) {
            TapAction::Drop
        } else {
            TapAction::Pass
        }
    })));
}

#[test]
fn a_lost_packet_is_seen_out_of_sequence_naked_and_sent_again() {
    // Without selective repeat (as rxe): the packet after the lost one draws a NAK.
    let mut p = Pair::new(&PairOptions {
        selective_repeat: [false; 2],
        ..PairOptions::default()
    });
    let second = std::cell::Cell::new(0);
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        // The engine sends a long WRITE as one-packet WRITEs here: the second is lost.
        if d.from == 0 && pkt.bth.opcode.0 & 0x1f <= 0x0b && pkt.bth.opcode.0 & 0x1f >= 0x06 {
            second.set(second.get() + 1);
            if second.get() == 1 {
                return TapAction::Drop;
            }
        }
        TapAction::Pass
    })));
    let wr = write(&p, 1, 8_192, p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, wr);
    p.run();
    assert!(p.wcs(0).iter().all(|w| w.status == WcStatus::Success));
    let (a, qa) = counters(&p, 0);
    let (b, _) = counters(&p, 1);
    assert!(
        b[Counter::OutOfSeqRequest] >= 1,
        "{:?} {:?}",
        nonzero(&b),
        nonzero(&a)
    );
    assert_eq!(b[Counter::SentSeqNak], 1, "{:?}", nonzero(&b));
    assert_eq!(a[Counter::RcvdSeqErr], 1, "{:?}", nonzero(&a));
    assert_eq!(a[Counter::CompleterRetry], 1);
    assert!(a[Counter::Retransmitted] >= 1);
    assert_eq!(qa[Counter::Retransmitted], a[Counter::Retransmitted]);
    assert_eq!(a[Counter::RetryExceeded], 0);
}

#[test]
fn a_lost_ack_brings_a_duplicate_and_a_peer_that_never_answers_runs_out_of_retries() {
    // The WRITE's ACK is lost once: the requester probes or times out and sends again;
    // the responder sees a duplicate.
    let mut p = Pair::new(&PairOptions::default());
    drop_once(&mut p, 1, |op| op == Opcode::RC_ACKNOWLEDGE);
    let mut wr = write(&p, 1, 64, p.b.addr(0), p.b.mr.rkey);
    wr.flags = oxrdma_core::SendFlags::SIGNALED;
    p.post_send(0, wr);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    let (a, _) = counters(&p, 0);
    let (b, _) = counters(&p, 1);
    assert_eq!(b[Counter::DuplicateRequest], 1, "{:?}", nonzero(&b));
    assert!(
        a[Counter::Probes] + a[Counter::LocalAckTimeout] >= 1,
        "{:?}",
        nonzero(&a)
    );
    assert!(a[Counter::Retransmitted] >= 1);

    // Every packet to the peer lost: timeouts until the retry count runs out.
    let mut p = Pair::new(&PairOptions {
        retry_cnt: 3,
        ..PairOptions::default()
    });
    p.world.tap = Some(Tap(Box::new(|d| {
        if d.from == 0 {
            TapAction::Drop
        } else {
            TapAction::Pass
        }
    })));
    let wr = write(&p, 1, 64, p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, wr);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RetryExcErr);
    let (a, _) = counters(&p, 0);
    assert_eq!(a[Counter::RetryExceeded], 1, "{:?}", nonzero(&a));
    assert_eq!(a[Counter::CompleterRetry], 3, "{:?}", nonzero(&a));
    assert_eq!(a[Counter::LocalAckTimeout], 4, "{:?}", nonzero(&a));
    let (b, _) = counters(&p, 1);
    assert_eq!(b[Counter::RcvdPkts], 0);
}

#[test]
fn drops_are_counted_by_reason_and_destroyed_qps_still_count() {
    let mut p = Pair::new(&PairOptions::default());
    let (gid, node) = (p.world.nodes[0].engine.gid(), 1);
    // A packet to a QPN nobody has, and one that does not parse.
    let junk = [0xffu8; 5];
    let e = &mut p.world.nodes[node].engine;
    e.handle_packet(0, gid, &junk);
    let mut unknown = [0u8; 16];
    unknown[0] = Opcode::RC_SEND_ONLY.0;
    unknown[5..8].copy_from_slice(&[0xab, 0xcd, 0xef]);
    e.handle_packet(0, gid, &unknown);
    let (b, _) = counters(&p, 1);
    assert_eq!(b[Counter::Malformed], 1, "{:?}", nonzero(&b));
    assert_eq!(b[Counter::UnknownQp], 1, "{:?}", nonzero(&b));
    assert_eq!(b[Counter::RcvdPkts], 2);
    // A QP's counts outlive it.
    let wr = write(&p, 1, 4_000, p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, wr);
    p.run();
    let before = p.world.nodes[0].engine.counters();
    let qpn = p.a.qpn;
    p.world.nodes[0].engine.destroy_qp(qpn).unwrap();
    let after = p.world.nodes[0].engine.counters();
    assert_eq!(before, after);
    assert!(after[Counter::SentWrite] >= 4);
}

#[test]
fn a_request_repeated_within_its_rnr_wait_is_not_naked_again() {
    // Every SEND arrives twice (the network duplicates it): one RNR NAK per try, not two.
    let mut p = Pair::new(&PairOptions {
        rnr_retry: 2,
        ..PairOptions::default()
    });
    p.world.tap = Some(Tap(Box::new(|d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        if d.from == 0 && pkt.bth.opcode == Opcode::RC_SEND_ONLY {
            TapAction::Duplicate
        } else {
            TapAction::Pass
        }
    })));
    p.post_send(
        0,
        SendWr::new(
            1,
            WrOpcode::Send,
            SendData::Sges(vec![p.a.sge(0, 8)].into()),
        ),
    );
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RnrRetryExcErr);
    let (a, _) = counters(&p, 0);
    let (b, _) = counters(&p, 1);
    assert_eq!(b[Counter::SendRnrErr], 3, "{:?}", nonzero(&b));
    assert_eq!(b[Counter::RnrNakLimited], 3, "{:?}", nonzero(&b));
    assert_eq!(a[Counter::RcvdRnrErr], 3, "{:?}", nonzero(&a));
    // A receive posted, the next try lands.
    let mut p = Pair::new(&PairOptions::default());
    p.post_send(
        0,
        SendWr::new(
            1,
            WrOpcode::Send,
            SendData::Sges(vec![p.a.sge(0, 8)].into()),
        ),
    );
    let soon = p.world.now + 100_000;
    p.world.run_until_idle(soon);
    let sge = p.b.sge(0, 64);
    p.post_recv(1, 9, vec![sge]);
    p.run();
    assert_eq!(p.wcs(1)[0].status, WcStatus::Success);
    let (b, _) = counters(&p, 1);
    assert!(b[Counter::SendRnrErr] >= 1, "{:?}", nonzero(&b));
}
