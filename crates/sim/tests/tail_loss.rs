//! Losses around READs and atomics found by a probe, within milliseconds, not by the ACK
//! timeout. The pairs here use timeout 16 (268 ms): a test that waited for it would take
//! that long in virtual time. In the simulator's mixed workload at 1 % loss these stalls
//! made the median run 19 times as long as a lossless one.

use oxrdma_core::{SendData, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::{NetConfig, Pair, PairOptions, Tap, TapAction};
use oxrdma_wire::{Opcode, PacketRepr, Syndrome};

/// Well under the ACK timeout (268 ms), and over a few probe timeouts (1 ms each before an
/// RTT sample).
const QUICK: u64 = 20_000_000;

fn pair(selective_repeat: bool) -> Pair {
    Pair::new(&PairOptions {
        timeout: 16,
        selective_repeat: [selective_repeat, true],
        ..Default::default()
    })
}

/// `pair(selective_repeat)` with known PSNs (node 0's start at 100), after a WRITE that
/// gives the requester an RTT sample: the probe's timeout is then the path's.
fn sampled(selective_repeat: bool) -> Pair {
    sampled_over(selective_repeat, NetConfig::default(), 1)
}

/// `sampled`, over the path `net` with its random draws from `seed`.
fn sampled_over(selective_repeat: bool, net: NetConfig, seed: u64) -> Pair {
    let mut p = Pair::new(&PairOptions {
        seed,
        timeout: 16,
        selective_repeat: [selective_repeat, true],
        sq_psn: Some([100, 100]),
        net,
        ..Default::default()
    });
    p.post_send(0, wr(&p, 1, WrOpcode::RdmaWrite, 0, 0, 64));
    p.run();
    p
}

/// Drops the `n`th packet (from 1) for which `pick` is true, once.
fn drop_nth(p: &mut Pair, n: usize, pick: impl Fn(&PacketRepr<'_>) -> bool + 'static) {
    let mut seen = 0;
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        if pick(&pkt) {
            seen += 1;
            if seen == n {
                return TapAction::Drop;
            }
        }
        TapAction::Pass
    })));
}

/// Drops the first `n` packets of each `(opcode, n)`.
fn drop_first<const K: usize>(p: &mut Pair, drops: [(Opcode, usize); K]) {
    let mut seen = [0; K];
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        for (k, &(opcode, n)) in drops.iter().enumerate() {
            if pkt.bth.opcode == opcode && seen[k] < n {
                seen[k] += 1;
                return TapAction::Drop;
            }
        }
        TapAction::Pass
    })));
}

/// Drops the first `n` packets `pick` selects, and the first NAK: a go-back-N responder
/// then drops everything after the gap without a word, as rxe does once it has NAKed it.
fn drop_with_its_nak(p: &mut Pair, n: usize, pick: impl Fn(&PacketRepr<'_>) -> bool + 'static) {
    let (mut picked, mut naked) = (0, false);
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        let nak = matches!(pkt.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_)));
        if nak && !std::mem::replace(&mut naked, true) {
            return TapAction::Drop;
        }
        if pick(&pkt) && picked < n {
            picked += 1;
            return TapAction::Drop;
        }
        TapAction::Pass
    })));
}

/// Picks RDMA WRITE ONLY packets.
fn write_only(pkt: &PacketRepr<'_>) -> bool {
    pkt.bth.opcode == Opcode::RC_RDMA_WRITE_ONLY
}

fn wr(p: &Pair, wr_id: u64, opcode: WrOpcode, local: u64, remote: u64, len: usize) -> SendWr {
    let mut wr = SendWr::new(
        wr_id,
        opcode,
        SendData::Sges(vec![p.a.sge(local as usize, len)].into()),
    );
    wr.remote_addr = p.b.addr(remote as usize);
    wr.rkey = p.b.mr.rkey;
    wr
}

/// Runs the pair to the end; every WR of node 0 succeeded, in virtual time under `QUICK`.
fn completes_quickly(p: &mut Pair, wrs: usize) {
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(wcs.len(), wrs, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert!(p.world.now < QUICK, "done after {} ns", p.world.now);
}

#[test]
fn a_lost_atomic_request_is_probed() {
    for sr in [true, false] {
        let mut p = pair(sr);
        drop_nth(&mut p, 1, |pkt| pkt.bth.opcode == Opcode::RC_FETCH_ADD);
        p.b.buf.write(64, &1000u64.to_ne_bytes());
        let mut w = wr(&p, 1, WrOpcode::AtomicFetchAndAdd, 0, 64, 8);
        w.compare_add = 5;
        p.post_send(0, w);
        completes_quickly(&mut p, 1);
        assert_eq!(
            u64::from_ne_bytes(p.b.read(64, 8).try_into().unwrap()),
            1005
        );
    }
}

#[test]
fn a_lost_read_response_passed_by_a_later_ack_is_asked_again() {
    for sr in [true, false] {
        let mut p = pair(sr);
        drop_nth(&mut p, 1, |pkt| {
            pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY
        });
        p.b.buf.write(0, b"read me");
        p.post_recv(1, 9, vec![p.b.sge(4096, 64)]);
        p.post_send(0, wr(&p, 1, WrOpcode::RdmaRead, 0, 0, 7));
        let send = SendWr::new(
            2,
            WrOpcode::Send,
            SendData::Sges(vec![p.a.sge(100, 8)].into()),
        );
        p.post_send(0, send);
        completes_quickly(&mut p, 2);
        assert_eq!(p.a.read(0, 7), b"read me");
    }
}

#[test]
fn a_lost_write_behind_a_read_missing_its_last_response_is_probed() {
    for sr in [true, false] {
        let mut p = pair(sr);
        // The READ's last response and the WRITE after it are lost: nothing more comes
        // back, and a READ is outstanding.
        drop_first(
            &mut p,
            [
                (Opcode::RC_RDMA_READ_RESPONSE_LAST, 1),
                (Opcode::RC_RDMA_WRITE_ONLY, 1),
            ],
        );
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
        p.b.buf.write(8192, &data);
        p.post_send(0, wr(&p, 1, WrOpcode::RdmaRead, 0, 8192, 4096));
        p.post_send(0, wr(&p, 2, WrOpcode::RdmaWrite, 65536, 0, 100));
        completes_quickly(&mut p, 2);
        assert_eq!(p.a.read(0, 4096), data);
    }
}

#[test]
fn a_probe_does_not_time_a_packet_the_ack_timeout_sent_again() {
    // Before any RTT sample a probe times its packet from when the probe left. If the
    // packet, both probes and nothing else were lost, the ACK timeout sends it again, and
    // the ACK that comes answers that copy: timed from the probe, it read as the whole wait
    // (under 30 % loss a 1.7 s sample once set a 5 s ACK timeout).
    let mut p = Pair::new(&PairOptions {
        timeout: 10,
        ..Default::default()
    });
    drop_first(&mut p, [(Opcode::RC_SEND_ONLY, 3)]);
    p.post_recv(1, 9, vec![p.b.sge(0, 64)]);
    p.post_send(
        0,
        SendWr::new(
            1,
            WrOpcode::Send,
            SendData::Sges(vec![p.a.sge(0, 8)].into()),
        ),
    );
    p.run();
    assert_eq!(p.wcs(0)[0].status, WcStatus::Success);
    let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).unwrap();
    // The path's round trip is 10 us; the ACK timeout 4.2 ms, the probes 1 ms apart.
    assert!(t.srtt.is_none_or(|s| s < 100_000), "srtt {:?}", t.srtt);
}

#[test]
fn a_gap_whose_nak_was_lost_is_probed_from_its_start() {
    // Go-back-N, as with rxe: the responder NAKs a gap once and drops what follows it
    // (the last packet, probed again, too) until the missing packet comes.
    let mut p = pair(false);
    drop_with_its_nak(&mut p, 1, write_only);
    for i in 0..3u64 {
        p.post_send(0, wr(&p, i, WrOpcode::RdmaWrite, i * 64, i * 64, 64));
    }
    completes_quickly(&mut p, 3);
}

#[test]
fn a_probe_does_not_ask_again_for_a_read_that_is_answering() {
    // Go-back-N. A READ's responses stream over a slow link with one missing early on, and
    // a WRITE after it is lost. The probes fire while the stream runs: asking for the
    // missing piece then would make the responder start its stream again from there (rxe
    // drops what it was sending). The stream's end shows the gap; only that piece is asked
    // for again.
    let mut p = Pair::new(&PairOptions {
        timeout: 16,
        selective_repeat: [false, true],
        net: NetConfig {
            bandwidth_bps: 100_000_000,
            ..Default::default()
        },
        ..Default::default()
    });
    // An RTT sample first: without one a READ is never probed.
    p.post_send(0, wr(&p, 1, WrOpcode::RdmaWrite, 0, 0, 64));
    p.run();
    // READ requests sent before the stream's last response came.
    let early = std::rc::Rc::new(std::cell::Cell::new(0));
    let counted = early.clone();
    let (mut lost, mut ended) = ((false, false), false);
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        let (middle, write) = &mut lost;
        let first = match pkt.bth.opcode {
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE => !std::mem::replace(middle, true),
            Opcode::RC_RDMA_WRITE_ONLY => !std::mem::replace(write, true),
            Opcode::RC_RDMA_READ_RESPONSE_LAST => {
                ended = true;
                false
            }
            Opcode::RC_RDMA_READ_REQUEST if !ended => {
                counted.set(counted.get() + 1);
                false
            }
            _ => false,
        };
        if first {
            TapAction::Drop
        } else {
            TapAction::Pass
        }
    })));
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    p.b.buf.write(65536, &data);
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaRead, 65536, 65536, 65536));
    p.post_send(0, wr(&p, 3, WrOpcode::RdmaWrite, 0, 0, 64));
    p.run();
    let wcs = p.wcs(0);
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(p.a.read(65536, 65536), data);
    assert_eq!(early.get(), 1, "READ requests sent while the stream ran");
}

#[test]
fn a_resend_lost_again_at_the_tail_is_probed() {
    // Selective repeat: packet 1 of 4 and then its resend are lost. Nothing sent after the
    // resend can show it lost, so the probe must send it once more.
    resend_lost_again_completes(sampled(true), 4096);
}

/// A WRITE of `len` bytes on `p` (after `sampled`) whose second packet and its resend
/// are lost completes quickly with the right data.
fn resend_lost_again_completes(mut p: Pair, len: usize) {
    let mut copies = 0;
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        if pkt.bth.opcode == Opcode::RC_RDMA_WRITE_ONLY && pkt.bth.psn.value() == 102 {
            copies += 1;
            if copies <= 2 {
                return TapAction::Drop;
            }
        }
        TapAction::Pass
    })));
    let data: Vec<u8> = (0..len as u32).map(|i| (i % 249) as u8).collect();
    p.a.buf.write(8192, &data);
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaWrite, 8192, 8192, len));
    completes_quickly(&mut p, 2);
    assert_eq!(p.b.read(8192, len), data);
}

#[test]
fn a_replayed_read_response_is_no_sack() {
    // A READ response's AETH says ACK, and its payload is data. A replayed one (before
    // `una`) once had that data read as a SACK: a READ of 0xff bytes marked every packet
    // after it held, so a WRITE packet lost among them was never found lost.
    let mut p = sampled(true);
    let (mut replayed, mut lost) = (false, false);
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        match pkt.bth.opcode {
            Opcode::RC_RDMA_READ_RESPONSE_ONLY if !std::mem::replace(&mut replayed, true) => {
                TapAction::Duplicate
            }
            Opcode::RC_RDMA_WRITE_ONLY
                if pkt.bth.psn.value() == 104 && !std::mem::replace(&mut lost, true) =>
            {
                TapAction::Drop
            }
            _ => TapAction::Pass,
        }
    })));
    p.b.buf.write(4096, &[0xff; 1024]);
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaRead, 4096, 4096, 1024));
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 247) as u8).collect();
    p.a.buf.write(16384, &data);
    p.post_send(0, wr(&p, 3, WrOpcode::RdmaWrite, 16384, 16384, 8192));
    completes_quickly(&mut p, 3);
    assert_eq!(p.b.read(16384, 8192), data);
    let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).unwrap();
    assert_eq!(
        t.lost_resent, 1,
        "found lost by the SACKs that followed: {t:?}"
    );
}

#[test]
fn a_read_held_whose_response_was_lost_is_probed() {
    // Selective repeat: a WRITE is lost and the READ after it is held beyond the gap.
    // The WRITE sent again fills it; the READ's response is lost. The responder now holds
    // everything the requester sent: there is nothing lost to send again, and the probe
    // once sent nothing, leaving the READ to the ACK timeout.
    let mut p = sampled(true);
    drop_first(
        &mut p,
        [
            (Opcode::RC_RDMA_WRITE_ONLY, 1),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 1),
        ],
    );
    p.b.buf.write(4096, b"held, then lost");
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaWrite, 64, 64, 64));
    p.post_send(0, wr(&p, 3, WrOpcode::RdmaRead, 4096, 4096, 15));
    completes_quickly(&mut p, 3);
    assert_eq!(p.a.read(4096, 15), b"held, then lost");
}

#[test]
fn a_lost_write_before_an_atomic_is_probed() {
    // A WRITE is lost, and with it the atomic after it (selective repeat) or the NAK that
    // atomic drew (go-back-N: the responder then drops it without a word). The last packet
    // is an atomic that is not the oldest request, which a probe must not send again (the
    // responder would replay it). The WRITE at `una` goes alone instead; before, no probe
    // went and both waited for the ACK timeout.
    for sr in [true, false] {
        let mut p = sampled(sr);
        if sr {
            let drops = [(Opcode::RC_RDMA_WRITE_ONLY, 1), (Opcode::RC_FETCH_ADD, 1)];
            drop_first(&mut p, drops);
        } else {
            drop_with_its_nak(&mut p, 1, write_only);
        }
        p.b.buf.write(64, &7u64.to_ne_bytes());
        p.post_send(0, wr(&p, 2, WrOpcode::RdmaWrite, 128, 128, 64));
        let mut add = wr(&p, 3, WrOpcode::AtomicFetchAndAdd, 256, 64, 8);
        add.compare_add = 3;
        p.post_send(0, add);
        completes_quickly(&mut p, 3);
        assert_eq!(u64::from_ne_bytes(p.b.read(64, 8).try_into().unwrap()), 10);
        assert_eq!(u64::from_ne_bytes(p.a.read(256, 8).try_into().unwrap()), 7);
    }
}

#[test]
fn an_ack_past_a_waiting_read_counts_once_the_read_completes() {
    // Go-back-N. An ACK comes for part of a WRITE while the READ before it still lacks its
    // response. Once the READ completes, the WRITE is acknowledged that far: the last
    // packet's loss sends again only what follows (before, the whole WRITE went again).
    let mut p = Pair::new(&PairOptions {
        timeout: 16,
        selective_repeat: [false, true],
        sq_psn: Some([100, 100]),
        ..Default::default()
    });
    let packets = 70u32;
    drop_first(&mut p, [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 1)]);
    // The WRITE's last packet and the ACKs after the cadence's (of packet 64) are lost
    // until the ACK timeout: that go-back shows where `una` stood.
    let (mut lost, mut acks) = (0, 0);
    let inner = p.world.tap.take().unwrap();
    let mut inner = inner.0;
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).unwrap();
        let psn = pkt.bth.psn.value();
        let last = psn == 100 + packets && pkt.bth.opcode != Opcode::RC_ACKNOWLEDGE;
        let late_ack = pkt.bth.opcode == Opcode::RC_ACKNOWLEDGE && psn >= 100 + packets - 1;
        if last && lost < 3 {
            lost += 1;
            return TapAction::Drop;
        }
        if late_ack && acks < 4 {
            acks += 1;
            return TapAction::Drop;
        }
        inner(d)
    })));
    p.b.buf.write(0, b"read first");
    p.post_send(0, wr(&p, 1, WrOpcode::RdmaRead, 0, 0, 10));
    let len = packets as usize * 1024;
    let data: Vec<u8> = (0..len as u32).map(|i| (i % 241) as u8).collect();
    p.a.buf.write(65536, &data);
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaWrite, 65536, 65536, len));
    p.run();
    let wcs = p.wcs(0);
    assert!(
        wcs.len() == 2 && wcs.iter().all(|w| w.status == WcStatus::Success),
        "{wcs:?}"
    );
    assert_eq!(p.b.read(65536, len), data);
    let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).unwrap();
    assert!(t.packets_resent < 16, "{t:?}");
}

#[test]
fn a_read_whose_last_response_was_lost_is_probed() {
    // The responses of a READ came in order until its last, which was lost: nothing more
    // will come. The rest is asked for again (before, a READ whose responses had begun
    // was never probed, and waited for the ACK timeout).
    for sr in [true, false] {
        read_completes(sr, [(Opcode::RC_RDMA_READ_RESPONSE_LAST, 1)], 4096);
    }
}

/// A READ of `len` bytes on `sampled(sr)` whose responses the tap drops as `drops` says
/// (`drop_first`) completes quickly with the right data.
fn read_completes<const K: usize>(sr: bool, drops: [(Opcode, usize); K], len: usize) {
    let mut p = sampled(sr);
    drop_first(&mut p, drops);
    let data: Vec<u8> = (0..len as u32).map(|i| (i % 239) as u8).collect();
    p.b.buf.write(16384, &data);
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaRead, 16384, 16384, len));
    completes_quickly(&mut p, 2);
    assert_eq!(p.a.read(16384, len), data);
}

#[test]
fn a_resend_lost_again_is_probed_once_the_probes_waited_out_the_rtt_variance() {
    // As `a_resend_lost_again_at_the_tail_is_probed`, over a path whose delay varies
    // (20 us plus up to 50 us): the RTT varies so much that one probe timeout (3 SRTT) is
    // no more than SRTT + 4 RTTVAR, and the first probe cannot tell the resend lost. Both
    // probes did nothing, and it waited for the ACK timeout (with the path's draws of seed
    // 9); the second has waited two probe timeouts, past it.
    let net = NetConfig {
        delay: 20_000,
        jitter: 50_000,
        ..Default::default()
    };
    resend_lost_again_completes(sampled_over(true, net, 9), 8192);
}

#[test]
fn a_gap_answered_alone_goes_back_instead_of_crawling() {
    // Go-back-N: the first of 100 one-packet WRITEs is lost with its NAK, and an atomic
    // ends the stream. The probe sends the packet at `una` alone (the atomic may not go
    // again); its ACK moves `una` one packet, since the responder dropped what followed.
    // The next probe goes back from `una`: probing one packet at a time again took a
    // probe timeout per WRITE.
    let mut p = sampled(false);
    drop_with_its_nak(&mut p, 1, write_only);
    let writes = 100u64;
    for i in 0..writes {
        p.post_send(0, wr(&p, 2 + i, WrOpcode::RdmaWrite, i * 64, i * 64, 64));
    }
    let mut add = wr(&p, 2 + writes, WrOpcode::AtomicFetchAndAdd, 65536, 65536, 8);
    add.compare_add = 1;
    p.post_send(0, add);
    let start = p.world.now;
    completes_quickly(&mut p, writes as usize + 2);
    let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).unwrap();
    let srtt = t.srtt.expect("an RTT sample");
    // Four probe timeouts (3 SRTT each, at least 20 us) cover the recovery.
    let bound = 4 * (3 * srtt).max(20_000);
    assert!(
        p.world.now - start < bound,
        "{} ns, over {bound} (srtt {srtt} ns)",
        p.world.now - start
    );
}

#[test]
fn a_read_whose_responses_beyond_a_gap_stopped_is_probed() {
    // A READ's second response is lost, later ones arrive, and its last is lost too: no
    // stream end shows the gap lost. The READ at `una` is asked again from its first
    // missing response (before, a READ with responses beyond a gap was never probed).
    for sr in [true, false] {
        let drops = [
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 1),
        ];
        read_completes(sr, drops, 8192);
    }
}

#[test]
fn a_slow_first_answer_to_a_probed_atomic_does_not_send_the_later_ones_again() {
    // Before any RTT sample (the probe waits 1 ms), 20 atomics are answered after 3 ms, as
    // by a slow rxe, so a probe asks for the first again. The answer that comes is the
    // first copy's. Taken for the probe's, it showed the 19 atomics asked for before the
    // probe lost, and they all went again (against rxe: 127 atomics).
    for sr in [false, true] {
        let mut p = Pair::new(&PairOptions {
            timeout: 16,
            selective_repeat: [sr, true],
            max_rd_atomic: 16,
            ..Default::default()
        });
        p.world.tap = Some(Tap(Box::new(move |d| {
            let pkt = PacketRepr::parse(&d.data).unwrap();
            if pkt.bth.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE {
                return TapAction::Delay(3_000_000);
            }
            TapAction::Pass
        })));
        let atomics = 20u64;
        for i in 0..atomics {
            let mut add = wr(&p, i, WrOpcode::AtomicFetchAndAdd, 8 * i, 64, 8);
            add.compare_add = 1;
            p.post_send(0, add);
        }
        completes_quickly(&mut p, atomics as usize);
        assert_eq!(
            u64::from_ne_bytes(p.b.read(64, 8).try_into().unwrap()),
            atomics
        );
        let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).unwrap();
        assert!(t.packets_resent <= 2, "sr {sr}: {t:?}");
    }
}

#[test]
fn a_stall_whose_second_probe_is_lost_is_probed_again() {
    // Go-back-N, with an RTT sample: a WRITE is lost, with the NAK the next one drew, and
    // the second probe's copy of it is lost too. Two probes were all a stall had before
    // the ACK timeout; with a sample there are four.
    let mut p = sampled(false);
    drop_with_its_nak(&mut p, 2, |pkt| {
        write_only(pkt) && pkt.bth.psn.value() == 101
    });
    for i in 0..3u64 {
        p.post_send(0, wr(&p, 2 + i, WrOpcode::RdmaWrite, i * 64, i * 64, 64));
    }
    completes_quickly(&mut p, 4);
}

/// A READ short of its first response holds `una`, and the ACK of a WRITE behind it times
/// the round trip all the same. The READ's request was timed, but asked for again (the
/// first response lost) it is timed no more (Karn); the WRITE posted then is. The request
/// asking again is lost too, so a probe must ask once more: with the sample it waits a
/// few RTTs, without it (before: no sample while a READ held `una`, at 5 % loss much of
/// the time) twice the 1 ms guess.
#[test]
fn an_ack_past_a_read_short_of_a_response_times_the_round_trip() {
    use std::cell::Cell;
    use std::rc::Rc;
    for sr in [true, false] {
        let mut p = pair(sr);
        let requests = Rc::new(Cell::new(0));
        let (seen, mut firsts) = (requests.clone(), 0);
        p.world.tap = Some(Tap(Box::new(move |d| {
            let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
            let op = pkt.bth.opcode;
            if op == Opcode::RC_RDMA_READ_RESPONSE_FIRST {
                firsts += 1;
                if firsts == 1 {
                    return TapAction::Drop;
                }
            }
            if op == Opcode::RC_RDMA_READ_REQUEST {
                seen.set(seen.get() + 1);
                if seen.get() == 2 {
                    return TapAction::Drop; // the request asking for the lost response
                }
            }
            TapAction::Pass
        })));
        p.post_send(0, wr(&p, 1, WrOpcode::RdmaRead, 0, 0, 4096));
        let t0 = p.world.now;
        p.world.run_until_idle(t0 + 200_000);
        assert_eq!(requests.get(), 2, "the READ was asked for again");
        p.post_send(0, wr(&p, 2, WrOpcode::RdmaWrite, 8192, 8192, 64));
        completes_quickly(&mut p, 2);
        assert_eq!(p.b.read(0, 4096), p.a.read(0, 4096));
        let took = p.world.now - t0;
        assert!(took < 800_000, "sr {sr}: done after {took} ns");
    }
}

#[test]
fn a_lost_read_request_after_reads_is_probed() {
    // READs one after another, the fifth's request lost. Its READ was the only packet
    // outstanding, so only a probe can find it (it took the ACK timeout: seed 1009 of
    // `sim --selective-repeat 0 --loss 0.05` stalled 24 times so).
    for sr in [false, true] {
        let mut p = sampled(sr);
        p.wcs(0);
        drop_nth(&mut p, 5, |pkt| {
            pkt.bth.opcode == Opcode::RC_RDMA_READ_REQUEST
        });
        p.b.buf.write(0, &[7u8; 256]);
        for i in 0..8 {
            p.post_send(0, wr(&p, 10 + i, WrOpcode::RdmaRead, 256 * i, 0, 256));
            p.run();
        }
        let wcs = p.wcs(0);
        assert_eq!(wcs.len(), 8, "sr {sr}: {wcs:?}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert!(
            p.world.now < QUICK,
            "sr {sr}: done after {} ns",
            p.world.now
        );
    }
}

#[test]
fn after_an_ack_timeout_a_lost_read_request_is_probed() {
    // A pair with no RTT estimate yet: the first READ's request is lost and only the ACK
    // timeout finds it. The copy it sends is timed, so the next lost READ request is
    // probed within milliseconds.
    for sr in [false, true] {
        let mut p = pair(sr);
        drop_first(&mut p, [(Opcode::RC_RDMA_READ_REQUEST, 1)]);
        p.b.buf.write(0, &[7u8; 256]);
        p.post_send(0, wr(&p, 1, WrOpcode::RdmaRead, 0, 0, 256));
        p.run();
        assert_eq!(p.wcs(0).len(), 1);
        let start = p.world.now;
        drop_first(&mut p, [(Opcode::RC_RDMA_READ_REQUEST, 1)]);
        p.post_send(0, wr(&p, 2, WrOpcode::RdmaRead, 256, 0, 256));
        p.run();
        let wcs = p.wcs(0);
        assert_eq!(wcs.len(), 1);
        assert_eq!(wcs[0].status, WcStatus::Success);
        let took = p.world.now - start;
        assert!(took < QUICK, "sr {sr}: the second READ took {took} ns");
    }
}

/// Go-back-N, after an RTT estimate from a 2 ms path whose delay then falls to 10 us: a
/// 64 KiB READ loses every other response up to the 40th, and the requester asks for them
/// again one by one, each a round trip (rxe replays a READ's pieces only upwards). The
/// 14th of those requests is lost, and only a probe finds it. The repair requests ask
/// for responses known lost, so they are timed: by then the estimate has come down, and
/// the probe waits a fraction of what the stale one set: the READ takes 1.2 ms (before:
/// 5.5 ms, the probe waiting for half the ACK timeout of a 2 ms path).
#[test]
fn a_read_repaired_piece_by_piece_times_its_requests() {
    let mut p = sampled_over(
        false,
        NetConfig {
            delay: 1_000_000,
            ..NetConfig::default()
        },
        1,
    );
    p.world.net.config.delay = 5_000;
    let (mut responses, mut requests) = (0, 0);
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine sends valid packets");
        let op = pkt.bth.opcode;
        if op == Opcode::RC_RDMA_READ_REQUEST {
            requests += 1;
            if requests == 15 {
                return TapAction::Drop; // the 14th asking again
            }
        } else if op.to_string().starts_with("RC_RDMA_READ_RESPONSE") {
            responses += 1;
            // The first response stream: every other one of its first 40.
            if responses <= 40 && responses % 2 == 0 {
                return TapAction::Drop;
            }
        }
        TapAction::Pass
    })));
    p.b.buf
        .write(0, &(0..=255u8).cycle().take(65536).collect::<Vec<_>>());
    let t0 = p.world.now;
    p.post_send(0, wr(&p, 2, WrOpcode::RdmaRead, 0, 0, 65536));
    completes_quickly(&mut p, 2);
    assert_eq!(p.a.read(0, 65536), p.b.read(0, 65536));
    let took = p.world.now - t0;
    eprintln!("the READ took {took} ns");
    assert!(took < 3_000_000, "the READ took {took} ns");
}
