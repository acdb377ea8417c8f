//! The engine's state machines and error paths, each provoked on purpose through two
//! simulated hosts.

use oxrdma_core::{
    Access, AsyncEvent, EventType, QpAttr, QpState, RecvWr, SendData, SendFlags, SendWr,
    VerbsError, WcOpcode, WcStatus, WrOpcode,
};
use oxrdma_sim::{Pair, PairOptions, Tap, TapAction};
use oxrdma_wire::{NakCode, Opcode, PacketRepr, Syndrome};
use std::cell::RefCell;
use std::rc::Rc;

fn write(wr_id: u64, sge: oxrdma_core::Sge, remote: u64, rkey: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::RdmaWrite, SendData::Sges(vec![sge].into()));
    wr.remote_addr = remote;
    wr.rkey = rkey;
    wr
}

fn read(wr_id: u64, sge: oxrdma_core::Sge, remote: u64, rkey: u32) -> SendWr {
    SendWr {
        opcode: WrOpcode::RdmaRead,
        ..write(wr_id, sge, remote, rkey)
    }
}

fn send(wr_id: u64, sge: oxrdma_core::Sge) -> SendWr {
    SendWr::new(wr_id, WrOpcode::Send, SendData::Sges(vec![sge].into()))
}

/// (opcode, PSN, AckReq, AETH syndrome) of every packet sent.
type PacketLog = Rc<RefCell<Vec<(Opcode, u32, bool, Option<Syndrome>)>>>;

/// Records every packet sent, and applies `decide` to it.
fn tap(p: &mut Pair, mut decide: impl FnMut(&PacketRepr<'_>) -> TapAction + 'static) -> PacketLog {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        l.borrow_mut().push((
            pkt.bth.opcode,
            pkt.bth.psn.value(),
            pkt.bth.ack_req,
            pkt.ext.aeth.map(|a| a.syndrome),
        ));
        decide(&pkt)
    })));
    log
}

fn events(p: &mut Pair, n: usize) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| p.world.nodes[n].engine.poll_event()).collect()
}

#[test]
fn write_then_read_back() {
    let mut p = Pair::new(&PairOptions::default());
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    p.a.buf.write(0, &data);
    let wr = write(1, p.a.sge(0, data.len()), p.b.addr(4096), p.b.mr.rkey);
    p.post_send(
        0,
        SendWr {
            flags: SendFlags::SIGNALED,
            ..wr
        },
    );
    let rd = read(2, p.a.sge(65536, data.len()), p.b.addr(4096), p.b.mr.rkey);
    p.post_send(0, rd);
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaRead),
        ]
    );
    assert_eq!(wcs[1].byte_len, 10_000);
    assert_eq!(p.b.read(4096, data.len()), data);
    assert_eq!(p.a.read(65536, data.len()), data);
}

#[test]
fn bad_rkey_is_a_remote_access_error_and_both_qps_fail() {
    let mut p = Pair::new(&PairOptions::default());
    p.post_recv(1, 77, vec![p.b.sge(0, 64)]);
    let log = tap(&mut p, |_| TapAction::Pass);
    let bad = write(1, p.a.sge(0, 100), p.b.addr(0), p.b.mr.rkey ^ 1);
    p.post_send(0, bad);
    p.post_send(0, send(2, p.a.sge(0, 8)));
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.world.nodes[0].engine.qp_state(p.a.qpn).unwrap(),
        QpState::Err
    );
    // The responder NAKed once, went to ERR, said why, and flushed its receive.
    let naks = log
        .borrow()
        .iter()
        .filter(|e| e.3 == Some(Syndrome::Nak(NakCode::RemoteAccessError)))
        .count();
    assert_eq!(naks, 1);
    assert_eq!(
        p.world.nodes[1].engine.qp_state(p.b.qpn).unwrap(),
        QpState::Err
    );
    assert_eq!(
        events(&mut p, 1),
        vec![AsyncEvent::Qp {
            qpn: p.b.qpn,
            event: EventType::QpAccessErr
        }]
    );
    let r = p.wcs(1);
    assert_eq!((r[0].wr_id, r[0].status), (77, WcStatus::WrFlushErr));
}

#[test]
fn read_past_the_region_and_write_without_permission_are_refused() {
    let mut p = Pair::new(&PairOptions {
        buf_len: 4096,
        ..Default::default()
    });
    let past = read(1, p.a.sge(0, 100), p.b.addr(4000), p.b.mr.rkey);
    p.post_send(0, past);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RemAccessErr);

    let o = PairOptions {
        qp_access: Access::REMOTE_READ,
        ..Default::default()
    };
    let mut p = Pair::new(&o);
    let w = write(1, p.a.sge(0, 16), p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, w);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut p = Pair::new(&PairOptions::default());
    let mut wr = SendWr::new(
        1,
        WrOpcode::AtomicFetchAndAdd,
        SendData::Sges(vec![p.a.sge(0, 8)].into()),
    );
    wr.remote_addr = p.b.addr(4);
    wr.rkey = p.b.mr.rkey;
    p.post_send(0, wr);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RemInvReqErr);
    assert_eq!(
        events(&mut p, 1),
        vec![AsyncEvent::Qp {
            qpn: p.b.qpn,
            event: EventType::QpReqErr
        }]
    );
}

#[test]
fn send_longer_than_the_receive_buffer() {
    let mut p = Pair::new(&PairOptions::default());
    p.post_recv(1, 9, vec![p.b.sge(0, 100)]);
    p.post_send(0, send(1, p.a.sge(0, 3000)));
    p.run();
    // rxe NAKs it with a remote operational error (seen in the conformance suite).
    assert_eq!(p.wcs(0)[0].status, WcStatus::RemOpErr);
    let r = p.wcs(1);
    assert_eq!((r[0].wr_id, r[0].status), (9, WcStatus::LocQpOpErr));
}

#[test]
fn one_packet_send_lands_across_the_receive_sges() {
    let mut p = Pair::new(&PairOptions::default());
    assert!(p.a.buf.write(0, b"0123456789"));
    // 3 bytes, an empty SGE, then the rest (and room to spare).
    p.post_recv(1, 9, vec![p.b.sge(200, 3), p.b.sge(0, 0), p.b.sge(300, 64)]);
    p.post_send(0, send(1, p.a.sge(0, 10)));
    p.run();
    let r = p.wcs(1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (9, WcStatus::Success, 10)
    );
    assert_eq!(p.b.read(200, 4), b"012\0");
    assert_eq!(p.b.read(300, 8), b"3456789\0");
}

#[test]
fn one_packet_send_longer_than_the_receive_buffer() {
    let mut p = Pair::new(&PairOptions::default());
    // Two SGEs of 4 bytes: a 10-byte SEND (one packet) does not fit.
    p.post_recv(1, 9, vec![p.b.sge(0, 4), p.b.sge(100, 4)]);
    p.post_send(0, send(1, p.a.sge(0, 10)));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RemOpErr);
    let r = p.wcs(1);
    assert_eq!((r[0].wr_id, r[0].status), (9, WcStatus::LocQpOpErr));
}

#[test]
fn receive_with_a_bad_lkey_is_a_remote_operational_error() {
    let mut p = Pair::new(&PairOptions::default());
    let mut sge = p.b.sge(0, 100);
    sge.lkey ^= 1;
    p.post_recv(1, 9, vec![sge]);
    p.post_send(0, send(1, p.a.sge(0, 10)));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RemOpErr);
    assert_eq!(p.wcs(1)[0].status, WcStatus::LocProtErr);
}

#[test]
fn a_write_that_cannot_gather_completes_in_order_then_flushes() {
    let mut p = Pair::new(&PairOptions::default());
    let e = &mut p.world.nodes[0].engine;
    e.post_send(
        p.a.qpn,
        SendWr {
            flags: SendFlags::SIGNALED,
            ..write(1, p.a.sge(0, 8), p.b.addr(0), p.b.mr.rkey)
        },
    )
    .unwrap();
    let mut bad = p.a.sge(0, 8);
    bad.addr = p.a.addr(p.a.buf.len()); // just past the region
    e.post_send(p.a.qpn, write(2, bad, p.b.addr(0), p.b.mr.rkey))
        .unwrap();
    e.post_send(p.a.qpn, write(3, p.a.sge(0, 8), p.b.addr(0), p.b.mr.rkey))
        .unwrap();
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success),
            // As rxe's requester fails a packet it cannot build.
            (2, WcStatus::LocQpOpErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
}

#[test]
fn rnr_retry_exhausted() {
    let mut p = Pair::new(&PairOptions {
        rnr_retry: 2,
        ..Default::default()
    });
    let log = tap(&mut p, |_| TapAction::Pass);
    p.post_send(0, send(1, p.a.sge(0, 10)));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::RnrRetryExcErr);
    // One first try plus rnr_retry retries, each answered by an RNR NAK with min_rnr_timer.
    let rnrs = log
        .borrow()
        .iter()
        .filter(|e| matches!(e.3, Some(Syndrome::RnrNak { timer: 1 })))
        .count();
    assert_eq!(rnrs, 3);
}

#[test]
fn rnr_then_receive_posted_succeeds() {
    let mut p = Pair::new(&PairOptions {
        min_rnr_timer: 14,
        ..Default::default()
    });
    p.post_send(0, send(1, p.a.sge(0, 10)));
    p.world.run_until_idle(p.world.now + 500_000); // the RNR NAK arrives; 1.28 ms wait
    p.post_recv(1, 5, vec![p.b.sge(0, 64)]);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    let r = p.wcs(1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (5, WcStatus::Success, 10)
    );
}

#[test]
fn retry_exhausted_when_the_peer_is_gone() {
    let mut p = Pair::new(&PairOptions {
        retry_cnt: 3,
        ..Default::default()
    });
    // Every request vanishes (so no NAK either): only timeouts drive retransmission.
    let log = tap(&mut p, |pkt| match pkt.bth.opcode {
        Opcode::RC_RDMA_WRITE_ONLY | Opcode::RC_SEND_ONLY => TapAction::Drop,
        _ => TapAction::Pass,
    });
    let w = write(1, p.a.sge(0, 8), p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, w);
    p.post_send(0, send(2, p.a.sge(0, 8)));
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    // The first transmission, two tail-loss probes (the first resends the last packet,
    // the SEND; the second, the first having drawn nothing, the oldest, the WRITE; neither
    // spends retry_cnt), and retry_cnt retransmissions of both on timeout, then nothing.
    let sent = |op| log.borrow().iter().filter(|e| e.0 == op).count();
    let (writes, sends) = (sent(Opcode::RC_RDMA_WRITE_ONLY), sent(Opcode::RC_SEND_ONLY));
    assert_eq!((writes, sends), (1 + 1 + 3, 1 + 1 + 3), "WRITEs and SENDs");
    // Timed out after 4.096 us × 2^10 × (retry_cnt + 1).
    assert!(
        p.world.now >= 4 * 4_194_304,
        "gave up after {} ns",
        p.world.now
    );
}

#[test]
fn a_gap_is_naked_once_and_resent_from_the_missing_psn() {
    // Go-back-N, as with rxe (the requester does not offer selective repeat).
    let mut p = Pair::new(&PairOptions {
        mtu: oxrdma_core::Mtu::Mtu256,
        selective_repeat: [false, true],
        ..Default::default()
    });
    // The WRITE is a train of WRITE ONLYs (each names its own address): the second is
    // lost once; the RETH of every WRITE packet is noted.
    let first = p.a.sq_psn;
    let mut dropped = false;
    let reths = Rc::new(RefCell::new(Vec::new()));
    let r = reths.clone();
    let log = tap(&mut p, move |pkt| {
        if let Some(reth) = pkt.ext.reth {
            r.borrow_mut()
                .push((pkt.bth.psn.value(), reth.virtual_address));
        }
        if pkt.bth.psn.value() == (first + 1) & 0xff_ffff && !dropped {
            dropped = true;
            return TapAction::Drop;
        }
        TapAction::Pass
    });
    let data: Vec<u8> = (0..2560u32).map(|i| i as u8).collect();
    p.a.buf.write(0, &data);
    let w = write(1, p.a.sge(0, 2560), p.b.addr(0), p.b.mr.rkey);
    p.post_send(
        0,
        SendWr {
            flags: SendFlags::SIGNALED,
            ..w
        },
    );
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    assert_eq!(p.b.read(0, 2560), data);
    let log = log.borrow();
    let naks: Vec<_> = log
        .iter()
        .filter(|e| e.3 == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .collect();
    assert_eq!(naks.len(), 1, "one NAK per gap");
    // The NAK names the first missing PSN, and the resend starts there, with the address
    // of that packet's bytes.
    assert_eq!(naks[0].1, (first + 1) & 0xff_ffff);
    let writes: Vec<_> = log
        .iter()
        .filter(|e| e.0 .0 >= 0x06 && e.0 .0 <= 0x0a)
        .map(|e| (e.0, e.1))
        .collect();
    assert_eq!(
        writes.len(),
        10 + 9,
        "10 packets, then 9 resent from the gap: {writes:?}"
    );
    assert_eq!(
        writes[10],
        (Opcode::RC_RDMA_WRITE_ONLY, (first + 1) & 0xff_ffff)
    );
    assert_eq!(reths.borrow()[10], ((first + 1) & 0xff_ffff, p.b.addr(256)));
}

#[test]
fn duplicate_atomic_is_answered_from_the_cache_not_executed_again() {
    let mut p = Pair::new(&PairOptions::default());
    let mut acks_dropped = 0;
    tap(&mut p, move |pkt| match pkt.bth.opcode {
        Opcode::RC_FETCH_ADD => TapAction::Duplicate,
        Opcode::RC_ATOMIC_ACKNOWLEDGE if acks_dropped < 2 => {
            acks_dropped += 1;
            TapAction::Drop
        }
        _ => TapAction::Pass,
    });
    p.b.buf.write(64, &1000u64.to_ne_bytes());
    let mut wr = SendWr::new(
        1,
        WrOpcode::AtomicFetchAndAdd,
        SendData::Sges(vec![p.a.sge(0, 8)].into()),
    );
    wr.remote_addr = p.b.addr(64);
    wr.rkey = p.b.mr.rkey;
    wr.compare_add = 5;
    p.post_send(0, wr);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    assert_eq!(
        u64::from_ne_bytes(p.b.read(64, 8).try_into().unwrap()),
        1005,
        "executed once"
    );
    assert_eq!(
        u64::from_ne_bytes(p.a.read(0, 8).try_into().unwrap()),
        1000,
        "original value"
    );
}

#[test]
fn compare_and_swap_swaps_only_on_match() {
    let mut p = Pair::new(&PairOptions::default());
    p.b.buf.write(0, &7u64.to_ne_bytes());
    for (id, compare, swap) in [(1, 8, 100), (2, 7, 200)] {
        let mut wr = SendWr::new(
            id,
            WrOpcode::AtomicCmpAndSwp,
            SendData::Sges(vec![p.a.sge(8 * id as usize, 8)].into()),
        );
        wr.remote_addr = p.b.addr(0);
        wr.rkey = p.b.mr.rkey;
        wr.compare_add = compare;
        wr.swap = swap;
        p.post_send(0, wr);
    }
    p.run();
    assert!(p.wcs(0).iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(u64::from_ne_bytes(p.a.read(8, 8).try_into().unwrap()), 7);
    assert_eq!(u64::from_ne_bytes(p.a.read(16, 8).try_into().unwrap()), 7);
    assert_eq!(u64::from_ne_bytes(p.b.read(0, 8).try_into().unwrap()), 200);
}

#[test]
fn lost_read_response_is_fetched_again() {
    let mut p = Pair::new(&PairOptions {
        mtu: oxrdma_core::Mtu::Mtu512,
        ..Default::default()
    });
    let mut n = 0;
    tap(&mut p, move |pkt| {
        if pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            n += 1;
            if n == 3 {
                return TapAction::Drop;
            }
        }
        TapAction::Pass
    });
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    p.b.buf.write(1000, &data);
    p.post_send(0, read(1, p.a.sge(0, 5000), p.b.addr(1000), p.b.mr.rkey));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    assert_eq!(p.a.read(0, 5000), data);
}

#[test]
fn immediate_data_and_inline_sends() {
    let mut p = Pair::new(&PairOptions::default());
    let e1 = &mut p.world.nodes[1].engine;
    e1.post_recv(
        p.b.qpn,
        RecvWr {
            wr_id: 10,
            sges: vec![p.b.sge(0, 64)].into(),
        },
    )
    .unwrap();
    e1.post_recv(
        p.b.qpn,
        RecvWr {
            wr_id: 11,
            sges: vec![].into(),
        },
    )
    .unwrap();
    let e0 = &mut p.world.nodes[0].engine;
    let mut s = SendWr::new(
        1,
        WrOpcode::SendWithImm,
        SendData::Inline(b"hello"[..].into()),
    );
    s.imm = 0x1122_3344;
    e0.post_send(p.a.qpn, s).unwrap();
    let mut w = SendWr::new(
        2,
        WrOpcode::RdmaWriteWithImm,
        SendData::Inline(b"world"[..].into()),
    );
    w.imm = 0xdead_beef;
    w.remote_addr = p.b.addr(100);
    w.rkey = p.b.mr.rkey;
    e0.post_send(p.a.qpn, w).unwrap();
    p.run();
    let r = p.wcs(1);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm),
        (10, WcOpcode::Recv, 5, Some(0x1122_3344))
    );
    assert_eq!(
        (r[1].wr_id, r[1].opcode, r[1].byte_len, r[1].imm),
        (11, WcOpcode::RecvRdmaWithImm, 5, Some(0xdead_beef))
    );
    assert_eq!(p.b.read(0, 5), b"hello");
    assert_eq!(p.b.read(100, 5), b"world");
    assert_eq!(r[0].src_qp, p.a.qpn);
}

#[test]
fn unsignaled_wrs_complete_silently_unless_sq_sig_all() {
    for sig_all in [false, true] {
        let mut p = Pair::new(&PairOptions {
            sq_sig_all: sig_all,
            ..Default::default()
        });
        let e = &mut p.world.nodes[0].engine;
        let mut w = write(1, p.a.sge(0, 8), p.b.addr(0), p.b.mr.rkey);
        w.flags = SendFlags::empty();
        e.post_send(p.a.qpn, w.clone()).unwrap();
        e.post_send(
            p.a.qpn,
            SendWr {
                wr_id: 2,
                flags: SendFlags::SIGNALED,
                ..w
            },
        )
        .unwrap();
        p.run();
        let ids: Vec<u64> = p.wcs(0).iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, if sig_all { vec![1, 2] } else { vec![2] });
    }
}

#[test]
fn ack_req_cadence_and_one_ack_per_ack_req() {
    let mut p = Pair::new(&PairOptions {
        mtu: oxrdma_core::Mtu::Mtu256,
        ..Default::default()
    });
    let log = tap(&mut p, |_| TapAction::Pass);
    let w = write(1, p.a.sge(0, 100 * 256), p.b.addr(0), p.b.mr.rkey);
    p.post_send(0, w);
    p.run();
    let log = log.borrow();
    let reqs: Vec<_> = log
        .iter()
        .filter(|e| e.0 != Opcode::RC_ACKNOWLEDGE)
        .collect();
    assert_eq!(reqs.len(), 100);
    let with_ack_req: Vec<usize> = reqs
        .iter()
        .enumerate()
        .filter(|(_, e)| e.2)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(with_ack_req, vec![63, 99], "every 64th packet and the last");
    let acks: Vec<_> = log
        .iter()
        .filter(|e| e.0 == Opcode::RC_ACKNOWLEDGE)
        .collect();
    assert_eq!(acks.len(), 2);
    // AETH like rxe: ACK with the "no credit count" value 31; MSN counts completed messages.
    assert!(acks
        .iter()
        .all(|a| a.3 == Some(Syndrome::Ack { credits: 31 })));
}

#[test]
fn fence_waits_for_an_earlier_read() {
    let mut p = Pair::new(&PairOptions::default());
    let log = tap(&mut p, |_| TapAction::Pass);
    p.post_recv(1, 1, vec![p.b.sge(0, 64)]);
    let e = &mut p.world.nodes[0].engine;
    e.post_send(p.a.qpn, read(1, p.a.sge(0, 4000), p.b.addr(0), p.b.mr.rkey))
        .unwrap();
    let mut s = send(2, p.a.sge(8000, 8));
    s.flags = SendFlags::SIGNALED | SendFlags::FENCE;
    e.post_send(p.a.qpn, s).unwrap();
    p.run();
    let log = log.borrow();
    let last_resp = log
        .iter()
        .rposition(|e| e.0 == Opcode::RC_RDMA_READ_RESPONSE_LAST)
        .unwrap();
    let send_at = log
        .iter()
        .position(|e| e.0 == Opcode::RC_SEND_ONLY)
        .unwrap();
    assert!(
        send_at > last_resp,
        "fenced SEND went out before the READ finished"
    );
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut p = Pair::new(&PairOptions {
        max_rd_atomic: 1,
        ..Default::default()
    });
    let log = tap(&mut p, |_| TapAction::Pass);
    let e = &mut p.world.nodes[0].engine;
    for i in 0..3 {
        e.post_send(
            p.a.qpn,
            read(
                i,
                p.a.sge(i as usize * 4096, 2000),
                p.b.addr(0),
                p.b.mr.rkey,
            ),
        )
        .unwrap();
    }
    p.run();
    assert!(p.wcs(0).iter().all(|w| w.status == WcStatus::Success));
    // Each READ request goes out only after the previous one's last response.
    let log = log.borrow();
    let kinds: Vec<Opcode> = log
        .iter()
        .map(|e| e.0)
        .filter(|o| *o == Opcode::RC_RDMA_READ_REQUEST || *o == Opcode::RC_RDMA_READ_RESPONSE_LAST)
        .collect();
    use Opcode as O;
    assert_eq!(
        kinds,
        vec![
            O::RC_RDMA_READ_REQUEST,
            O::RC_RDMA_READ_RESPONSE_LAST,
            O::RC_RDMA_READ_REQUEST,
            O::RC_RDMA_READ_RESPONSE_LAST,
            O::RC_RDMA_READ_REQUEST,
            O::RC_RDMA_READ_RESPONSE_LAST
        ]
    );
}

#[test]
fn qp_state_machine_rules() {
    let mut p = Pair::new(&PairOptions::default());
    let e = &mut p.world.nodes[0].engine;
    // Posting needs RTS for sends, INIT for receives.
    let pd = p.a.pd;
    let init = oxrdma_core::QpInitAttr {
        qp_type: oxrdma_core::QpType::Rc,
        send_cq: p.a.cq,
        recv_cq: p.a.cq,
        cap: Default::default(),
        sq_sig_all: false,
        srq: None,
    };
    let q = e.create_qp(pd, &init).unwrap();
    assert!(matches!(
        e.post_send(q, send(1, p.a.sge(0, 8))),
        Err(VerbsError::BadState { .. })
    ));
    assert!(matches!(
        e.post_recv(
            q,
            RecvWr {
                wr_id: 1,
                sges: vec![].into()
            }
        ),
        Err(VerbsError::BadState { .. })
    ));
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        ..Default::default()
    };
    assert!(matches!(
        e.modify_qp(q, &rts),
        Err(VerbsError::InvalidTransition { .. })
    ));
    assert_eq!(e.qp_state(q).unwrap(), QpState::Reset);
    // ERR flushes at once, including WRs posted afterwards.
    let err = QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    };
    e.modify_qp(p.a.qpn, &err).unwrap();
    e.post_send(p.a.qpn, send(5, p.a.sge(0, 8))).unwrap();
    e.post_recv(
        p.a.qpn,
        RecvWr {
            wr_id: 6,
            sges: vec![].into(),
        },
    )
    .unwrap();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (5, WcStatus::WrFlushErr, WcOpcode::Send),
            (6, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
    // RESET empties the queues without completions, and the QP can be connected again.
    let e = &mut p.world.nodes[0].engine;
    e.modify_qp(
        p.a.qpn,
        &QpAttr {
            qp_state: Some(QpState::Reset),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e.qp_state(p.a.qpn).unwrap(), QpState::Reset);
    // Bad posts are refused synchronously.
    assert!(matches!(
        e.post_send(p.b.qpn, send(1, p.a.sge(0, 8))),
        Err(VerbsError::NotFound(_))
    ));
}

#[test]
fn post_send_arguments_are_checked() {
    let mut p = Pair::new(&PairOptions::default());
    let e = &mut p.world.nodes[0].engine;
    let many = SendWr::new(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![p.a.sge(0, 1); 5].into()),
    );
    assert!(matches!(
        e.post_send(p.a.qpn, many),
        Err(VerbsError::InvalidArgument(_))
    ));
    let long_inline = SendWr::new(1, WrOpcode::Send, SendData::Inline(vec![0; 65].into()));
    assert!(matches!(
        e.post_send(p.a.qpn, long_inline),
        Err(VerbsError::InvalidArgument(_))
    ));
    let short_atomic = SendWr::new(
        1,
        WrOpcode::AtomicFetchAndAdd,
        SendData::Sges(vec![p.a.sge(0, 4)].into()),
    );
    assert!(matches!(
        e.post_send(p.a.qpn, short_atomic),
        Err(VerbsError::InvalidArgument(_))
    ));
    for i in 0..128 {
        e.post_send(p.a.qpn, send(i, p.a.sge(0, 1))).unwrap();
    }
    assert!(matches!(
        e.post_send(p.a.qpn, send(999, p.a.sge(0, 1))),
        Err(VerbsError::Exhausted(_))
    ));
}

#[test]
fn cq_overflow_is_reported_and_nothing_is_lost() {
    let mut p = Pair::new(&PairOptions {
        cq_depth: 2,
        sq_sig_all: true,
        ..Default::default()
    });
    for i in 0..5 {
        p.post_send(0, write(i, p.a.sge(0, 8), p.b.addr(0), p.b.mr.rkey));
    }
    p.run();
    assert_eq!(
        events(&mut p, 0),
        vec![AsyncEvent::Cq {
            cq: p.a.cq,
            event: EventType::CqErr
        }]
    );
    assert_eq!(p.wcs(0).len(), 5);
}

#[test]
fn wire_details_match_linux_rxe() {
    let mut p = Pair::new(&PairOptions::default());
    let sports = Rc::new(RefCell::new(Vec::new()));
    let s2 = sports.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        s2.borrow_mut()
            .push((d.src_port, PacketRepr::parse(&d.data).unwrap().bth.pkey));
        TapAction::Pass
    })));
    p.post_recv(1, 1, vec![p.b.sge(0, 64)]);
    p.post_send(0, send(1, p.a.sge(0, 8)));
    p.run();
    let want = oxrdma_core::rc_udp_sport(p.a.qpn, p.b.qpn);
    assert!(sports
        .borrow()
        .iter()
        .all(|&(sp, pkey)| sp == want && pkey == 0xffff));
    assert!(want >= 0xc000);
}

/// A pair 3 ms apart each way (slower than the first probe timeout), every packet logged.
fn slow_pair() -> (Pair, PacketLog) {
    let mut p = Pair::new(&PairOptions {
        net: oxrdma_sim::NetConfig {
            delay: 3_000_000,
            ..Default::default()
        },
        timeout: 16,
        ..Default::default()
    });
    let log = tap(&mut p, |_| TapAction::Pass);
    (p, log)
}

#[test]
fn a_peer_slower_than_the_first_probe_timeout_is_learnt_not_probed_forever() {
    // 3 ms each way: the first tail-loss probe (1 ms, before any RTT sample) is spurious.
    // Karn's rule alone would discard every sample after it and probe every message again.
    let (mut p, log) = slow_pair();
    for i in 0..20u64 {
        p.post_recv(1, i, vec![p.b.sge(0, 64)]);
        p.post_send(0, send(i, p.a.sge(0, 8)));
        p.run();
        assert_eq!(p.wcs(0).len(), 1, "message {i}");
    }
    let sends = log
        .borrow()
        .iter()
        .filter(|e| e.0 == Opcode::RC_SEND_ONLY)
        .count();
    // The first message may be probed (twice at most); the other 19 go out once.
    assert!(sends <= 20 + 2, "{sends} SENDs for 20 messages");
}

#[test]
fn a_slow_read_is_not_probed_into_a_replay() {
    // 3 ms each way and 16 response packets: a probe would re-request the READ and the
    // responder would replay all of it.
    let (mut p, log) = slow_pair();
    p.post_send(0, read(1, p.a.sge(0, 16 * 1024), p.b.addr(0), p.b.mr.rkey));
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    let log = log.borrow();
    let requests = log
        .iter()
        .filter(|e| e.0 == Opcode::RC_RDMA_READ_REQUEST)
        .count();
    let responses = log
        .iter()
        .filter(|e| e.0 .0 >= 0x0d && e.0 .0 <= 0x10)
        .count();
    assert_eq!((requests, responses), (1, 16));
}

#[test]
fn sqd_drains_what_started_then_raises_sq_drained_once() {
    let mut p = Pair::new(&PairOptions::default());
    // Three WRITEs go out at once; then the QP moves to SQD before any ACK is back.
    for i in 1..=3 {
        let mut w = write(i, p.a.sge(0, 3000), p.b.addr(0), p.b.mr.rkey);
        w.flags = SendFlags::SIGNALED;
        p.post_send(0, w);
    }
    let mut out = vec![0u8; oxrdma_core::MAX_PACKET];
    let e = &mut p.world.nodes[0].engine;
    while e.poll_transmit(0, &mut out).is_some() {}
    let sqd = QpAttr {
        qp_state: Some(QpState::Sqd),
        ..Default::default()
    };
    let qpn = p.a.qpn;
    e.modify_qp(qpn, &sqd).unwrap();
    // A fourth, posted in SQD, waits.
    let mut w = write(4, p.a.sge(0, 8), p.b.addr(0), p.b.mr.rkey);
    w.flags = SendFlags::SIGNALED;
    e.post_send(qpn, w).unwrap();
    let drained = |p: &mut Pair| {
        std::iter::from_fn(|| p.world.nodes[0].engine.poll_event())
            .filter(|ev| {
                *ev == AsyncEvent::Qp {
                    qpn,
                    event: EventType::SqDrained,
                }
            })
            .count()
    };
    assert_eq!(
        drained(&mut p),
        0,
        "not before the started WRITEs are acknowledged"
    );
    p.run();
    let ids: Vec<u64> = p.wcs(0).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    assert_eq!(drained(&mut p), 1);
    // Back to RTS: the waiting WRITE goes; no second event.
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        ..Default::default()
    };
    p.world.nodes[0].engine.modify_qp(qpn, &rts).unwrap();
    p.run();
    assert_eq!(
        p.wcs(0).iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!(drained(&mut p), 0);
}

/// Two QPs of node a, each with two 60-packet WRITEs queued (240 packets).
fn two_busy_qps() -> Pair {
    let o = PairOptions::default();
    let mut p = Pair::new(&o);
    let gb = oxrdma_core::Gid::from(p.world.nodes[1].ip);
    let e = &mut p.world.nodes[0].engine;
    let init = oxrdma_core::QpInitAttr {
        qp_type: o.qp_type,
        send_cq: p.a.cq,
        recv_cq: p.a.cq,
        cap: o.cap,
        sq_sig_all: false,
        srq: None,
    };
    let second = e.create_qp(p.a.pd, &init).expect("qp");
    for attr in oxrdma_sim::pair::connect_attrs(&o, gb, p.b.qpn, 1, 1) {
        e.modify_qp(second, &attr).expect("modify");
    }
    let len = 60 * 1024; // 60 packets at the pair's 1024-byte MTU
    for (i, qpn) in [(0, p.a.qpn), (2, second)] {
        for k in 0..2 {
            let wr = write(i + k, p.a.sge(0, len), p.b.addr(0), p.b.mr.rkey);
            e.post_send(qpn, wr).expect("post");
        }
    }
    p
}

#[test]
fn busy_qps_take_turns_in_bursts_of_sixty_packets() {
    // The engine sends 60 packets of one QP, then 60 of the other (a UDP driver's whole
    // send batch, one system call from that QP's socket), not one packet each in turn.
    let mut p = two_busy_qps();
    let e = &mut p.world.nodes[0].engine;
    let mut buf = vec![0u8; oxrdma_core::MAX_PACKET];
    let mut ports = Vec::new();
    while let Some(t) = e.poll_transmit(0, &mut buf) {
        ports.push(t.src_port);
    }
    let mut bursts: Vec<usize> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        if i > 0 && ports[i - 1] == *port {
            *bursts.last_mut().unwrap() += 1;
        } else {
            bursts.push(1);
        }
    }
    assert_eq!(ports.len(), 240, "every packet of the four WRITEs");
    assert_eq!(bursts, vec![60; 4], "turns of 60 packets, QP by QP");
}

/// What identifies a packet of `two_busy_qps`, the remote address taken from the base of
/// that pair's buffer (each pair's buffer lies elsewhere in memory).
type Sent = (
    oxrdma_core::Transmit,
    Opcode,
    u32,
    bool,
    Option<(u64, u32, u32)>,
    Vec<u8>,
);

fn sent(t: oxrdma_core::Transmit, bytes: &[u8], base: u64) -> Sent {
    let pkt = PacketRepr::parse(bytes).expect("engine sends valid packets");
    let reth = pkt
        .ext
        .reth
        .map(|r| (r.virtual_address - base, r.rkey, r.dma_length));
    let b = &pkt.bth;
    (
        t,
        b.opcode,
        b.psn.value(),
        b.ack_req,
        reth,
        pkt.payload.to_vec(),
    )
}

#[test]
fn many_slots_at_once_send_what_one_at_a_time_sends() {
    // The UDP driver fills every free slot of its batch in one call, packets back to back;
    // the simulator asks for one packet at a time. Same engines, same work: the same
    // packets, in order.
    let one_by_one = {
        let mut p = two_busy_qps();
        let base = p.b.addr(0);
        let mut buf = vec![0u8; oxrdma_core::MAX_PACKET];
        let mut out = Vec::new();
        while let Some(t) = p.world.nodes[0].engine.poll_transmit(0, &mut buf) {
            out.push(sent(t, &buf[..t.len], base));
        }
        out
    };
    let mut p = two_busy_qps();
    let base = p.b.addr(0);
    // 7 slots a call: turns of 16 are cut short and go on in the next call.
    let mut slots = vec![0u8; 7 * oxrdma_core::MAX_PACKET];
    let mut out = Vec::new();
    loop {
        let mut got = Vec::new();
        let e = &mut p.world.nodes[0].engine;
        e.poll_transmit_many(0, &mut slots, |t| got.push(t));
        if got.is_empty() {
            break;
        }
        assert!(got.len() <= 7);
        // Back to back: each packet starts where the one before it ended.
        let mut at = 0;
        for t in got {
            out.push(sent(t, &slots[at..at + t.len], base));
            at += t.len;
        }
    }
    assert_eq!((out.len(), one_by_one.len()), (240, 240));
    assert!(out == one_by_one, "the same packets in the same order");
}

/// `reads` READs of 16 packets each (MTU 1024), all outstanding at once, whose responses at
/// the indexes in `lose` (counted from the first READ's first PSN) are dropped, as many
/// times as the index is listed, and whose response `late` is held back 3 us (later ones
/// overtake it). Returns the length asked for by each READ request, and how many response
/// packets were sent.
fn reads_with_gaps(reads: u64, lose: &[u32], late: Option<u32>) -> (Vec<u32>, usize) {
    let (asked, sent) = read_requests_with_gaps(reads, lose, late);
    (asked.iter().map(|&(_, len)| len).collect(), sent)
}

/// `reads_with_gaps`, with each READ request's first PSN (counted like `lose`) beside its
/// length.
fn read_requests_with_gaps(
    reads: u64,
    lose: &[u32],
    late: Option<u32>,
) -> (Vec<(u32, u32)>, usize) {
    let mut p = Pair::new(&PairOptions::default());
    let len = 16_384usize;
    let data: Vec<u8> = (0..len as u32 * reads as u32)
        .map(|i| (i * 13 + i / 1024) as u8)
        .collect();
    p.b.buf.write(0, &data);
    let asked = Rc::new(RefCell::new(Vec::new()));
    let (a, responses) = (asked.clone(), Rc::new(RefCell::new(0usize)));
    let r = responses.clone();
    let (lose, mut dropped, mut held) = (lose.to_vec(), Vec::new(), false);
    let mut base = None;
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        let psn = pkt.bth.psn.value();
        if pkt.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
            let len = pkt.ext.reth.expect("a READ has a RETH").dma_length;
            a.borrow_mut().push((psn - *base.get_or_insert(psn), len));
        }
        let is_response = matches!(
            pkt.bth.opcode,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST
                | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                | Opcode::RC_RDMA_READ_RESPONSE_LAST
                | Opcode::RC_RDMA_READ_RESPONSE_ONLY
        );
        if !is_response {
            return TapAction::Pass;
        }
        *r.borrow_mut() += 1;
        let i = psn - base.expect("the request went first");
        let times = |v: &[u32]| v.iter().filter(|&&x| x == i).count();
        if times(&lose) > times(&dropped) {
            dropped.push(i);
            TapAction::Drop
        } else if late == Some(i) && !held {
            held = true;
            TapAction::Delay(3_000)
        } else {
            TapAction::Pass
        }
    })));
    for k in 0..reads {
        let at = k as usize * len;
        let mut rd = read(k, p.a.sge(4096 + at, len), p.b.addr(at), p.b.mr.rkey);
        rd.flags = SendFlags::SIGNALED;
        p.post_send(0, rd);
    }
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..reads)
            .map(|k| (k, WcStatus::Success))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        p.a.read(4096, data.len()),
        data,
        "the READs' bytes, in place"
    );
    let asked = asked.borrow().clone();
    let sent = *responses.borrow();
    (asked, sent)
}

fn read_with_gaps(lose: &[u32], late: Option<u32>) -> (Vec<u32>, usize) {
    reads_with_gaps(1, lose, late)
}

#[test]
fn a_lost_read_response_is_asked_for_alone() {
    // Go-back-N asked again from the lost one on: 11 KiB and 27 responses.
    assert_eq!(read_with_gaps(&[5], None), (vec![16_384, 1_024], 17));
}

#[test]
fn read_responses_lost_in_two_places_are_asked_for_piece_by_piece() {
    assert_eq!(
        read_with_gaps(&[3, 9], None),
        (vec![16_384, 1_024, 1_024], 18)
    );
    // The last one lost: found by the ACK timeout, asked for alone.
    assert_eq!(read_with_gaps(&[15], None), (vec![16_384, 1_024], 17));
}

#[test]
fn read_responses_that_overtake_a_late_one_are_kept() {
    assert_eq!(read_with_gaps(&[], Some(5)), (vec![16_384], 16));
    // Late past the stream's end: the missing one alone is asked for, once.
    assert_eq!(read_with_gaps(&[], Some(15)), (vec![16_384], 16));
}

#[test]
fn responses_to_later_reads_are_kept_while_an_earlier_one_has_a_gap() {
    let four = vec![16_384; 4];
    // One lost in the first READ: the three later READs' responses are placed as they come
    // and only the lost one is asked for again (going back from it asked for 59 KiB more).
    assert_eq!(
        reads_with_gaps(4, &[5], None),
        ([four.clone(), vec![1_024]].concat(), 65)
    );
    // Lost in a later READ only, and in two READs.
    assert_eq!(
        reads_with_gaps(4, &[20], None),
        ([four.clone(), vec![1_024]].concat(), 65)
    );
    assert_eq!(
        reads_with_gaps(4, &[5, 37], None),
        ([four.clone(), vec![1_024, 1_024]].concat(), 66)
    );
    // The asked-again one lost too: nothing is answered after it, so the ACK timeout
    // finds it, and it alone is asked for once more.
    assert_eq!(
        reads_with_gaps(4, &[5, 5], None),
        ([four.clone(), vec![1_024, 1_024]].concat(), 66)
    );
    // Overtaken, not lost: nothing asked again.
    assert_eq!(reads_with_gaps(4, &[], Some(5)), (four, 64));
}

#[test]
fn a_read_is_asked_for_again_lowest_piece_first() {
    // rxe replays a piece of a READ only at or above the last piece it replayed, so
    // after a piece is asked for, no lower one may be: responses 3 and 9 lost, and 3
    // lost again when asked for.
    let (asked, sent) = read_requests_with_gaps(1, &[3, 9, 3], None);
    assert_eq!(asked, [(0, 16_384), (3, 1_024), (3, 1_024), (9, 1_024)]);
    assert_eq!(sent, 19);
}

/// An 8-byte WRITE of byte `i + 1` to b's offset `8 * i`, signaled or not.
fn small_write(p: &mut Pair, i: u64, signaled: bool) {
    p.a.buf.write(8 * i as usize, &[i as u8 + 1; 8]);
    let mut w = write(
        i,
        p.a.sge(8 * i as usize, 8),
        p.b.addr(8 * i as usize),
        p.b.mr.rkey,
    );
    if !signaled {
        w.flags = SendFlags::empty();
    }
    p.post_send(0, w);
}

/// Runs the simulation `ns` further: a ping-pong's pause before its next message (the
/// default network's round trip is 10 us, a tail-loss probe waits 3 of them).
fn pause(p: &mut Pair, ns: u64) {
    let until = p.world.now + ns;
    p.world.run_until_idle(until);
}

/// Whether each WRITE sent (in order) asked for an ACK, and how many ACKs came back.
fn write_asks(log: &PacketLog) -> (Vec<bool>, usize) {
    let log = log.borrow();
    let asks = log
        .iter()
        .filter(|e| e.0 == Opcode::RC_RDMA_WRITE_ONLY)
        .map(|e| e.2)
        .collect();
    let acks = log.iter().filter(|e| e.0 == Opcode::RC_ACKNOWLEDGE).count();
    (asks, acks)
}

#[test]
fn unsignaled_writes_a_round_trip_apart_ask_for_an_ack_once_in_16() {
    let mut p = Pair::new(&PairOptions::default());
    let log = tap(&mut p, |_| TapAction::Pass);
    // A first signaled WRITE gives the requester its round-trip time.
    small_write(&mut p, 0, true);
    p.run();
    for i in 1..=20 {
        small_write(&mut p, i, false);
        pause(&mut p, 15_000);
    }
    small_write(&mut p, 21, true);
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(0, WcStatus::Success), (21, WcStatus::Success)]
    );
    for i in 0..22 {
        assert_eq!(p.b.read(8 * i, 8), vec![i as u8 + 1; 8], "WRITE {i}");
    }
    // The signaled ones ask, and the 16th unsignaled one; three ACKs (were 22).
    let mut want = vec![false; 22];
    (want[0], want[16], want[21]) = (true, true, true);
    assert_eq!(write_asks(&log), (want, 3));
}

#[test]
fn a_stream_of_unsignaled_writes_asks_once_in_a_quarter_of_the_queue() {
    let mut p = Pair::new(&PairOptions::default());
    let log = tap(&mut p, |_| TapAction::Pass);
    for i in 0..20 {
        small_write(&mut p, i, i == 19);
    }
    p.run();
    assert_eq!(p.wcs(0).len(), 1);
    for i in 0..20 {
        assert_eq!(p.b.read(8 * i, 8), vec![i as u8 + 1; 8], "WRITE {i}");
    }
    // Back to back with 20 outstanding: every fifth asks, so that ACKs free the send
    // queue's slots without one per message.
    let (asks, acks) = write_asks(&log);
    let want: Vec<bool> = (0..20).map(|i| i % 5 == 4).collect();
    assert_eq!((asks, acks), (want, 4));
    // A shallow stream (three outstanding) asks at every message of the stream: not the
    // first, which comes long after the last (as a ping-pong's does).
    let log = tap(&mut p, |_| TapAction::Pass);
    for i in 0..3 {
        small_write(&mut p, 20 + i, i == 2);
    }
    p.run();
    assert_eq!(p.wcs(0).len(), 1);
    assert_eq!(write_asks(&log).0, vec![false, true, true]);
}

#[test]
fn an_unsignaled_tail_is_acknowledged_through_the_probe() {
    let mut p = Pair::new(&PairOptions::default());
    small_write(&mut p, 0, true);
    p.run();
    assert_eq!(p.wcs(0).len(), 1);
    let log = tap(&mut p, |_| TapAction::Pass);
    for i in 1..=3 {
        small_write(&mut p, i, false);
        pause(&mut p, 15_000);
    }
    p.run();
    assert!(p.wcs(0).is_empty(), "unsignaled WRs complete silently");
    // Three WRITEs without AckReq, then the tail-loss probe sends the last one again,
    // asking for an ACK, and the ACK covers all three.
    let sent: Vec<(Opcode, u32, bool)> = log.borrow().iter().map(|e| (e.0, e.1, e.2)).collect();
    let first = sent[0].1;
    let w = Opcode::RC_RDMA_WRITE_ONLY;
    assert_eq!(
        sent,
        vec![
            (w, first, false),
            (w, first + 1, false),
            (w, first + 2, false),
            (w, first + 2, true),
            (Opcode::RC_ACKNOWLEDGE, first + 2, false),
        ]
    );
    // Their send-queue slots are free again: a full queue's worth posts.
    for i in 0..128 {
        small_write(&mut p, i, i == 127);
    }
    p.run();
    assert_eq!(p.wcs(0).len(), 1);
}

/// A signaled 8-byte WRITE from end `from` (0 = a) into the other end's buffer at `off`.
fn write_across(p: &Pair, from: usize, wr_id: u64, off: usize) -> SendWr {
    let (src, dst) = if from == 0 {
        (&p.a, &p.b)
    } else {
        (&p.b, &p.a)
    };
    src.buf.write(off, &[wr_id as u8; 8]);
    write(wr_id, src.sge(off, 8), dst.addr(off), dst.mr.rkey)
}

/// The packets `log` saw, as (opcode, PSN).
fn sent_psns(log: &PacketLog) -> Vec<(Opcode, u32)> {
    log.borrow().iter().map(|e| (e.0, e.1)).collect()
}

#[test]
fn a_ping_pongs_ack_waits_for_the_answer_and_goes_right_after_it() {
    let mut p = Pair::new(&PairOptions::default());
    let log = tap(&mut p, |_| TapAction::Pass);
    let (pa, pb) = (p.a.sq_psn, p.b.sq_psn);
    let (w, ack) = (Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_ACKNOWLEDGE);
    // b has sent nothing: its ACK of a's WRITE goes at once.
    p.post_send(0, write_across(&p, 0, 1, 0));
    p.run();
    assert_eq!(p.wcs(0).len(), 1);
    assert_eq!(sent_psns(&log), vec![(w, pa), (ack, pa)]);
    // b answers. a sent lately, so it holds its ACK (the WRITE arrives 5 us on)...
    p.post_send(1, write_across(&p, 1, 2, 8));
    pause(&mut p, 12_000);
    assert_eq!(sent_psns(&log)[2..], [(w, pb)]);
    assert!(p.wcs(1).is_empty(), "b's WRITE is not acknowledged yet");
    // ...until a's next WRITE, which it goes right after. b does not answer that one: its
    // ACK goes alone once the hold ends (10 us after the WRITE arrived).
    p.post_send(0, write_across(&p, 0, 3, 16));
    pause(&mut p, 12_000);
    assert_eq!(sent_psns(&log)[3..], [(w, pa + 1), (ack, pb)]);
    assert_eq!(
        p.wcs(1).len(),
        1,
        "b's WRITE completes with the ACK behind a's"
    );
    p.run();
    assert_eq!(sent_psns(&log)[5..], [(ack, pa + 1)]);
    assert_eq!(p.wcs(0).len(), 1);
    for (off, id) in [(0, 1), (8, 2), (16, 3)] {
        assert_eq!(
            (p.a.read(off, 8), p.b.read(off, 8)),
            (vec![id; 8], vec![id; 8])
        );
    }
}

#[test]
fn a_ping_pongs_ack_waits_longer_for_the_answer_where_only_the_engine_thread_would_send_it() {
    // a's application spins on its memory and calls nothing (riostream): the end of a
    // 10 us hold would wake a's engine thread for the ACK alone, so a holds it for its
    // answer longer, and b, with one message out, allows for that before it probes.
    let mut p = Pair::new(&PairOptions::default());
    p.world.nodes[0].engine.set_app_serves_timers(false);
    let log = tap(&mut p, |_| TapAction::Pass);
    let (pa, pb) = (p.a.sq_psn, p.b.sq_psn);
    let (w, ack) = (Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_ACKNOWLEDGE);
    // a has sent nothing: its ACK of b's WRITE goes at once, and b has a round-trip time
    // (10 us: a probe would wait 30).
    p.post_send(1, write_across(&p, 1, 1, 0));
    p.run();
    assert_eq!(sent_psns(&log), vec![(w, pb), (ack, pb)]);
    assert_eq!(p.wcs(1).len(), 1);
    // a answers; b's application serves its timers: b's ACK goes alone after 10 us.
    p.post_send(0, write_across(&p, 0, 2, 8));
    p.run();
    assert_eq!(sent_psns(&log)[2..], [(w, pa), (ack, pa)]);
    assert_eq!(p.wcs(0).len(), 1);
    // b writes again; a's answer is 150 us in coming: a still holds its ACK, and b has not
    // probed.
    p.post_send(1, write_across(&p, 1, 3, 16));
    pause(&mut p, 150_000);
    assert_eq!(sent_psns(&log)[4..], [(w, pb + 1)], "no ACK, no probe");
    assert!(p.wcs(1).is_empty());
    // a's answer takes the ACK along.
    p.post_send(0, write_across(&p, 0, 4, 24));
    pause(&mut p, 12_000);
    assert_eq!(sent_psns(&log)[5..], [(w, pa + 1), (ack, pb + 1)]);
    assert_eq!(p.wcs(1).len(), 1, "b's WRITE completes with a's answer");
    p.run();
    assert_eq!(sent_psns(&log)[7..], [(ack, pa + 1)]);
    // b writes and a never answers: b's probe (after three round trips and the 200 us it
    // allows a ping-pong's peer) ends a's hold (4 ms).
    p.post_send(1, write_across(&p, 1, 5, 32));
    let sent_at = p.world.now;
    p.run();
    assert_eq!(
        sent_psns(&log)[8..],
        [(w, pb + 2), (w, pb + 2), (ack, pb + 2)]
    );
    let took = p.world.now - sent_at;
    assert!(
        (200_000..1_000_000).contains(&took),
        "b's WRITE acknowledged after {took} ns"
    );
    assert_eq!(p.wcs(1).len(), 1);
    for (off, id) in [(0, 1), (8, 2), (16, 3), (24, 4), (32, 5)] {
        assert_eq!(
            (p.a.read(off, 8), p.b.read(off, 8)),
            (vec![id; 8], vec![id; 8])
        );
    }
}

#[test]
fn a_qp_with_more_than_one_message_out_acknowledges_at_once() {
    // Streams both ways must not hold ACKs (each side would wait for the other's): a has
    // two WRITEs out when b's arrives, so it acknowledges b's at once.
    let mut p = Pair::new(&PairOptions::default());
    let log = tap(&mut p, |_| TapAction::Pass);
    let pb = p.b.sq_psn;
    p.post_send(0, write_across(&p, 0, 1, 0));
    p.post_send(0, write_across(&p, 0, 2, 16));
    p.post_send(1, write_across(&p, 1, 3, 8));
    // The WRITEs cross (5 us each way); a's ACK of b's leaves as b's WRITE arrives.
    pause(&mut p, 7_000);
    let acked_b = log
        .borrow()
        .iter()
        .any(|e| (e.0, e.1) == (Opcode::RC_ACKNOWLEDGE, pb));
    assert!(acked_b, "a held its ACK with two WRITEs out");
    p.run();
    assert_eq!(p.wcs(0).len(), 2);
    assert_eq!(p.wcs(1).len(), 1);
}

/// A one-packet WRITE built by hand (the requester never sends these), handed to `b`'s
/// engine as the next request from `a`: RETH `dma_length`, `payload` bytes.
fn inject_write_only(p: &mut Pair, rkey: u32, dma_length: u32, payload: &[u8]) {
    use oxrdma_wire::{packet::ExtHeaders, BthRepr, Psn, RethRepr};
    let pkt = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            solicited: false,
            migreq: false,
            pkey: oxrdma_wire::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qpn: p.b.qpn,
            ack_req: true,
            psn: Psn::new(p.a.sq_psn),
            selective_repeat: false,
        },
        ext: ExtHeaders {
            reth: Some(RethRepr {
                virtual_address: p.b.addr(0),
                rkey,
                dma_length,
            }),
            ..ExtHeaders::default()
        },
        payload,
    };
    let mut buf = vec![0u8; 4200];
    let len = pkt.emit(&mut buf).expect("a valid packet");
    let src = oxrdma_core::Gid::from(p.world.nodes[0].ip);
    let now = p.world.now;
    p.world.nodes[1].engine.handle_packet(now, src, &buf[..len]);
}

#[test]
fn a_one_packet_write_is_checked_before_it_is_placed() {
    // Its length must be its payload's, and its key right, or nothing is written and the
    // responder NAKs (a length as an invalid request, a key as a remote access error).
    let cases = [
        (16, 8, true, NakCode::InvalidRequest),
        (8, 16, true, NakCode::InvalidRequest),
        (8, 8, false, NakCode::RemoteAccessError),
    ];
    for (dma_length, n, good_key, nak) in cases {
        let mut p = Pair::new(&PairOptions::default());
        let log = tap(&mut p, |_| TapAction::Pass);
        let rkey = if good_key {
            p.b.mr.rkey
        } else {
            p.b.mr.rkey ^ 1
        };
        inject_write_only(&mut p, rkey, dma_length, &vec![0xab; n]);
        p.run();
        let naks: Vec<_> = log.borrow().iter().filter_map(|e| e.3).collect();
        assert_eq!(
            naks,
            vec![Syndrome::Nak(nak)],
            "{dma_length} {n} {good_key}"
        );
        assert_eq!(p.b.read(0, 16), vec![0; 16], "nothing placed");
    }
    // And a right one is placed, and acknowledged.
    let mut p = Pair::new(&PairOptions::default());
    let log = tap(&mut p, |_| TapAction::Pass);
    let rkey = p.b.mr.rkey;
    inject_write_only(&mut p, rkey, 8, &[7; 8]);
    p.run();
    assert_eq!(p.b.read(0, 9), [vec![7; 8], vec![0]].concat());
    assert!(log
        .borrow()
        .iter()
        .any(|e| matches!(e.3, Some(Syndrome::Ack { .. }))));
}
