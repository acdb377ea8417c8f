//! Selective repeat between oxrdma peers, each behaviour provoked on purpose: what a gap
//! costs, that requests still take effect in order and once, and that a peer which does
//! not speak it (rxe) gets go-back-N.

use oxrdma_core::{SendData, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};
use oxrdma_sim::{Pair, PairOptions, Tap, TapAction};
use oxrdma_wire::{sack, NakCode, Opcode, PacketRepr, Syndrome};
use std::cell::RefCell;
use std::rc::Rc;

/// What the tap saw of each packet: opcode, PSN, selective-repeat bit, syndrome, the
/// runs its SACK shows held (start..end, as PSN values).
#[derive(Debug, Clone)]
struct Seen {
    opcode: Opcode,
    psn: u32,
    sr: bool,
    syndrome: Option<Syndrome>,
    sack: Vec<(u32, u32)>,
}

type Log = Rc<RefCell<Vec<Seen>>>;

/// Records every packet and drops those `drop` picks (by PSN distance from `base` and
/// opcode), each once.
fn lossy(p: &mut Pair, base: u32, mut drop: Vec<(u32, Opcode)>) -> Log {
    let log: Log = Rc::default();
    let l = log.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        let sack = if pkt.bth.opcode == Opcode::RC_ACKNOWLEDGE {
            sack::runs(pkt.bth.psn, pkt.payload)
                .map(|(s, e)| (s.value(), e.value()))
                .collect()
        } else {
            Vec::new()
        };
        l.borrow_mut().push(Seen {
            opcode: pkt.bth.opcode,
            psn: pkt.bth.psn.value(),
            sr: pkt.bth.selective_repeat,
            syndrome: pkt.ext.aeth.map(|a| a.syndrome),
            sack,
        });
        let key = (
            pkt.bth.psn.value().wrapping_sub(base) & 0xff_ffff,
            pkt.bth.opcode,
        );
        match drop.iter().position(|k| *k == key) {
            Some(i) => {
                drop.remove(i);
                TapAction::Drop
            }
            None => TapAction::Pass,
        }
    })));
    log
}

fn write(p: &Pair, wr_id: u64, from: usize, to: usize, len: usize) -> SendWr {
    let mut wr = SendWr::new(
        wr_id,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![p.a.sge(from, len)].into()),
    );
    wr.remote_addr = p.b.addr(to);
    wr.rkey = p.b.mr.rkey;
    wr.flags = SendFlags::SIGNALED;
    wr
}

fn naks(log: &Log) -> usize {
    log.borrow()
        .iter()
        .filter(|s| s.syndrome == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .count()
}

fn sent(log: &Log, opcode: Opcode) -> Vec<u32> {
    log.borrow()
        .iter()
        .filter(|s| s.opcode == opcode)
        .map(|s| s.psn)
        .collect()
}

#[test]
fn a_gap_is_sacked_and_only_the_lost_packet_is_sent_again() {
    let mut p = Pair::new(&PairOptions {
        mtu: oxrdma_core::Mtu::Mtu256,
        ..Default::default()
    });
    let first = p.a.sq_psn;
    let log = lossy(&mut p, first, vec![(1, Opcode::RC_RDMA_WRITE_ONLY)]);
    let data: Vec<u8> = (0..2560u32).map(|i| (i * 7) as u8).collect();
    p.a.buf.write(0, &data);
    let wr = write(&p, 1, 0, 0, 2560);
    p.post_send(0, wr);
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(p.b.read(0, 2560), data);
    let writes = sent(&log, Opcode::RC_RDMA_WRITE_ONLY);
    let missing = (first + 1) & 0xff_ffff;
    assert_eq!(
        writes.len(),
        11,
        "10 packets and the lost one again: {writes:?}"
    );
    assert_eq!(writes[10], missing);
    assert_eq!(naks(&log), 0, "a gap is no NAK under selective repeat");
    let log = log.borrow();
    assert!(log.iter().all(|s| s.sr), "both ends set the bit");
    // An ACK told the requester what the responder held beyond the gap.
    assert!(
        log.iter().any(|s| s
            .sack
            .first()
            .is_some_and(|b| b.0 == (missing + 1) & 0xff_ffff)),
        "a SACK run starts right after the gap: {log:?}"
    );
}

#[test]
fn a_peer_that_does_not_speak_it_gets_go_back_n() {
    for ends in [[true, false], [false, true]] {
        let mut p = Pair::new(&PairOptions {
            mtu: oxrdma_core::Mtu::Mtu256,
            selective_repeat: ends,
            ..Default::default()
        });
        let first = p.a.sq_psn;
        let log = lossy(&mut p, first, vec![(1, Opcode::RC_RDMA_WRITE_ONLY)]);
        let data: Vec<u8> = (0..2560u32).map(|i| (i * 3) as u8).collect();
        p.a.buf.write(0, &data);
        let wr = write(&p, 1, 0, 0, 2560);
        p.post_send(0, wr);
        p.run();
        assert_eq!(p.wcs(0)[0].status, WcStatus::Success, "{ends:?}");
        assert_eq!(p.b.read(0, 2560), data);
        assert_eq!(naks(&log), 1, "{ends:?}");
        let writes = sent(&log, Opcode::RC_RDMA_WRITE_ONLY);
        assert_eq!(writes.len(), 10 + 9, "{ends:?}: go back from the gap");
        let log = log.borrow();
        assert!(
            log.iter().all(|s| !s.sr || s.opcode.0 < 0x10 && ends[0]),
            "{ends:?}: only an offering requester sets the bit, and nobody answers it"
        );
    }
}

#[test]
fn overlapping_writes_land_in_the_order_sent_across_a_gap() {
    // Three WRITEs of one packet each to the same bytes; the first is lost. The responder
    // keeps the later two and executes them after the first is sent again, so the bytes
    // end as the last WRITE left them (IBA C9-28), not as the resent first.
    let mut p = Pair::new(&PairOptions::default());
    let first = p.a.sq_psn;
    let log = lossy(&mut p, first, vec![(0, Opcode::RC_RDMA_WRITE_ONLY)]);
    for (i, v) in [0x11u8, 0x22, 0x33].into_iter().enumerate() {
        p.a.buf.write(i * 512, &[v; 512]);
        let wr = write(&p, i as u64, i * 512, 0, 512);
        p.post_send(0, wr);
    }
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [0, 1, 2].map(|i| (i, WcStatus::Success))
    );
    assert_eq!(p.b.read(0, 512), vec![0x33; 512]);
    assert_eq!(sent(&log, Opcode::RC_RDMA_WRITE_ONLY).len(), 4);
}

#[test]
fn a_send_missing_its_first_packet_completes_its_receive_once() {
    let mut p = Pair::new(&PairOptions::default());
    let first = p.a.sq_psn;
    // 5 packets of 1 KiB: FIRST lost, and the MIDDLE after it too.
    let log = lossy(
        &mut p,
        first,
        vec![(0, Opcode::RC_SEND_FIRST), (1, Opcode::RC_SEND_MIDDLE)],
    );
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
    p.a.buf.write(0, &data);
    let sge = p.b.sge(8192, 5000);
    p.post_recv(1, 9, vec![sge]);
    let mut wr = SendWr::new(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![p.a.sge(0, 5000)].into()),
    );
    wr.flags = SendFlags::SIGNALED;
    p.post_send(0, wr);
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    let recv = p.wcs(1);
    assert_eq!(recv.len(), 1, "{recv:?}");
    assert_eq!(
        (
            recv[0].wr_id,
            recv[0].status,
            recv[0].opcode,
            recv[0].byte_len
        ),
        (9, WcStatus::Success, WcOpcode::Recv, 5000)
    );
    assert_eq!(p.b.read(8192, 5000), data);
    assert_eq!(naks(&log), 0);
    let resent = sent(&log, Opcode::RC_SEND_FIRST).len() + sent(&log, Opcode::RC_SEND_MIDDLE).len();
    assert_eq!(
        resent,
        1 + 3 + 2,
        "the FIRST and the MIDDLE again, nothing else"
    );
}

#[test]
fn a_window_of_thousands_crosses_the_psn_wrap_at_ten_percent_loss() {
    // A 20 ms, 1 Gbit/s path: the window grows to the bandwidth-delay product, far past
    // go-back-N's 512 PSNs, while the PSNs wrap past 2^24; a tenth of the packets each way
    // are lost. Every byte lands, and every WR completes once, in order.
    let mut p = Pair::new(&PairOptions {
        mtu: oxrdma_core::Mtu::Mtu1024,
        buf_len: 16 << 20,
        timeout: 14,
        sq_psn: Some([(1 << 24) - 3000, (1 << 24) - 10]),
        net: oxrdma_sim::NetConfig {
            loss: 0.1,
            delay: 10_000_000,
            bandwidth_bps: 1_000_000_000,
            queue_limit: 20_000_000,
            ..Default::default()
        },
        cap: oxrdma_core::QpCap {
            max_send_wr: 64,
            ..Default::default()
        },
        ..Default::default()
    });
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i ^ (i >> 11)) as u8).collect();
    p.a.buf.write(0, &data);
    for i in 0..8 {
        let at = i * (1 << 20);
        let wr = write(&p, i as u64, at, (8 << 20) + at, 1 << 20);
        p.post_send(0, wr);
    }
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..8).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.b.read(8 << 20, 8 << 20), data);
    let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).expect("qp");
    assert!(t.selective_repeat && t.window > 1024, "{t:?}");
    let psn = p.world.nodes[0]
        .engine
        .query_qp(p.a.qpn)
        .expect("qp")
        .0
        .sq_psn;
    assert!(psn.expect("sq_psn") < 1 << 20, "the PSNs wrapped");
}
