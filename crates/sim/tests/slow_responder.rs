//! READs from a responder slower than the requests: it answers them in order, a 1 MiB READ
//! every 40-80 ms (a TCG guest's rxe, a responder under AddressSanitizer), so whatever is
//! asked again waits behind megabytes of answers still to come.
//! - Fresh responses mean the responder is working: no ACK timeout may fire while they come
//!   (before, each expiry asked every READ again and the QP ended in RETRY_EXC after 0.3 s
//!   of steady progress: seeds 1 and 3 at 0.05 % loss, against a selective responder).
//! - A replay of what came already means the same: a request held on its way, asked again
//!   by a probe, costs one replay and no more (before, probes kept asking again the READ
//!   queued behind the replay).
//! - A replay after a probe shows the responder only paused: probes of READs then wait
//!   longer, and a responder that pauses for milliseconds is not asked everything twice.

use oxrdma_core::{Counter, Counters, Mtu, QpCap, SendData, SendFlags, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::{NetConfig, Pair, PairOptions};

const READS: usize = 20;
const LEN: usize = 1 << 20;

/// Runs READS 1 MiB READs over a path of `bps` losing `loss` of its packets; panics with
/// the case named if one fails, the ACK timeout fires, or more than 3 % comes twice.
fn reads(selective_repeat: [bool; 2], bps: u64, loss: f64, seed: u64) {
    let case = format!(
        "responder selective {}, {bps} bit/s, loss {loss}, seed {seed}",
        selective_repeat[1]
    );
    let net = NetConfig {
        bandwidth_bps: bps,
        loss,
        ..Default::default()
    };
    let mut p = pair(selective_repeat, 16, Mtu::Mtu4096, net, seed);
    let counts = run_reads(&mut p, &case);
    // 4 KiB responses: 256 a READ.
    let came = counts[Counter::RcvdReadResponse];
    assert!(
        came < (READS * 256) as u64 * 103 / 100,
        "{case}: {came} responses came"
    );
}

#[test]
fn reads_from_a_slow_responder_never_time_out() {
    for seed in 1..=3 {
        for responder_selective in [true, false] {
            let sr = [true, responder_selective];
            reads(sr, 200_000_000, 0.0, seed);
            reads(sr, 200_000_000, 0.0005, seed);
            reads(sr, 200_000_000, 0.002, seed);
            reads(sr, 100_000_000, 0.01, seed);
        }
    }
}

/// Every `every`th READ request is held back 40 ms on its way (a guest's scheduler, a
/// queue), with at most `rd` READs outstanding: the probe asks for it again, the responder
/// gets both copies and replays the READ for the second. Each held request may cost one
/// replay, no more. Before, probes fired while the replay streamed in, asking again the
/// READ queued behind it, each copy another replay (max_rd_atomic 1, every 3rd held: 74
/// requests for 20 READs, 11,283 responses twice).
fn held_requests(selective_repeat: [bool; 2], every: usize, rd: u8, seed: u64) {
    use oxrdma_sim::{Tap, TapAction};
    use oxrdma_wire::{Opcode, PacketRepr};
    let case = format!(
        "responder selective {}, every {every}th request held, max_rd_atomic {rd}, seed {seed}",
        selective_repeat[1]
    );
    let net = NetConfig {
        bandwidth_bps: 300_000_000,
        ..Default::default()
    };
    let mut p = pair(selective_repeat, rd, Mtu::Mtu1024, net, seed);
    let mut n = 0;
    p.world.tap = Some(Tap(Box::new(move |d| {
        let pkt = PacketRepr::parse(&d.data).expect("engine packets parse");
        if pkt.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
            n += 1;
            if n % every == 0 {
                return TapAction::Delay(40_000_000);
            }
        }
        TapAction::Pass
    })));
    let c = run_reads(&mut p, &case);
    // The held ones among the first READS requests (a held copy sent again may be held
    // too: that costs one more).
    let held = (READS / every) as u64 + 1;
    let (requests, stale) = (c[Counter::SentPkts], c[Counter::StaleResponse]);
    assert!(
        requests <= READS as u64 + 2 * held,
        "{case}: {requests} requests"
    );
    // 1 KiB responses: 1024 a READ.
    assert!(
        stale <= held * 1024 * 11 / 10,
        "{case}: {stale} responses twice"
    );
}

#[test]
fn a_held_request_costs_one_replay_at_most() {
    for seed in 1..=3 {
        for responder_selective in [true, false] {
            for (every, rd) in [(5, 1), (3, 1), (3, 2), (3, 16)] {
                held_requests([true, responder_selective], every, rd, seed);
            }
        }
    }
}

/// A responder that pauses: nothing arrives for `pause` every 30 ms (rxe in a TCG guest
/// stops for milliseconds mid-READ), at most `rd` READs outstanding. A probe that asks
/// again a READ whose responses only paused draws a replay of it; once replays show the
/// pauses, the requester waits them out: few replays, no timeout.
fn pausing(selective_repeat: [bool; 2], pause: u64, rd: u8, seed: u64) {
    let case = format!(
        "responder selective {}, pauses of {pause} ns, max_rd_atomic {rd}, seed {seed}",
        selective_repeat[1]
    );
    let net = NetConfig {
        bandwidth_bps: 300_000_000,
        stalls: (1..60)
            .map(|k| (k * 30_000_000, k * 30_000_000 + pause))
            .collect(),
        ..Default::default()
    };
    let mut p = pair(selective_repeat, rd, Mtu::Mtu1024, net, seed);
    let c = run_reads(&mut p, &case);
    let (requests, stale) = (c[Counter::SentPkts], c[Counter::StaleResponse]);
    // 1 KiB responses: 1024 a READ. Before, 19 pauses drew 2,122 (3 ms, max_rd_atomic 1) to
    // 5,572 (8 ms) responses twice; each replay now teaches the requester to wait longer.
    assert!(
        stale < 1536,
        "{case}: {requests} requests, {stale} responses twice"
    );
}

#[test]
fn pauses_are_waited_out() {
    for responder_selective in [true, false] {
        for (pause, rd) in [
            (3_000_000, 1),
            (8_000_000, 1),
            (8_000_000, 2),
            (8_000_000, 16),
        ] {
            pausing([true, responder_selective], pause, rd, 1);
        }
    }
}

/// Two QPs (timeout 14: 67 ms) over `net`, at most `rd` READs outstanding.
fn pair(selective_repeat: [bool; 2], rd: u8, mtu: Mtu, net: NetConfig, seed: u64) -> Pair {
    Pair::new(&PairOptions {
        seed,
        timeout: 14,
        max_rd_atomic: rd,
        mtu,
        buf_len: 16 << 20,
        selective_repeat,
        net,
        cap: QpCap {
            max_send_wr: 64,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// Posts the READs and runs the pair to the end; panics with `case` named unless every
/// READ succeeded with no ACK timeout. The requester's QP counters.
fn run_reads(p: &mut Pair, case: &str) -> Counters {
    post_reads(p);
    p.run();
    let wcs = p.wcs(0);
    let c = p.world.nodes[0].engine.qp_counters(p.a.qpn).unwrap();
    assert_eq!(wcs.len(), READS, "{case}: {wcs:?}");
    assert!(
        wcs.iter().all(|w| w.status == WcStatus::Success),
        "{case}: {wcs:?}"
    );
    assert_eq!(c[Counter::LocalAckTimeout], 0, "{case}");
    c
}

/// Posts READS signaled READs of LEN bytes, each of its own part of the peer's buffer.
fn post_reads(p: &mut Pair) {
    for i in 0..READS {
        let off = (i * LEN) % (16 << 20);
        let mut wr = SendWr::new(
            i as u64,
            WrOpcode::RdmaRead,
            SendData::Sges(vec![p.a.sge(off, LEN)].into()),
        );
        (wr.remote_addr, wr.rkey, wr.flags) = (p.b.addr(off), p.b.mr.rkey, SendFlags::SIGNALED);
        p.post_send(0, wr);
    }
}
