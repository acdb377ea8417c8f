//! ECN and RoCEv2 CNPs in the simulator: a router that marks CE once its queue holds more
//! than a few milliseconds, a responder that answers marked requests with CNPs, a
//! requester whose window yields to them. The same path without marking fills its queue
//! to twice the round trip; with it, the queue stays near the mark and nothing is lost.

use oxrdma_core::{Mtu, QpCap, QpTransport, SendData, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::{NetConfig, NetStats, Pair, PairOptions};

const RTT: u64 = 50_000_000;
const MIB: usize = 1 << 20;
/// WRITEs of 1 MiB per stream: 64 MiB, 2.7 s at the path's rate (a start's transient amortised).
const WRS: u64 = 64;

/// A 50 ms path through a 200 Mbit/s router (the hosts' ports are 10 Gbit/s) with a 100 ms
/// tail-drop queue that marks CE past `mark` and 0.1 % random loss
/// (0: never), and `WRS` WRITEs of 1 MiB over it. Returns the statuses, the time taken, the
/// requester's and the responder's transport, and the network's counters.
fn stream(
    seed: u64,
    mark: u64,
    sr: [bool; 2],
) -> (Vec<WcStatus>, u64, QpTransport, QpTransport, NetStats) {
    let o = PairOptions {
        seed,
        net: NetConfig {
            loss: 0.001,
            delay: RTT / 2,
            bottleneck_bps: 200_000_000,
            queue_limit: 100_000_000,
            ecn_threshold: mark,
            ..NetConfig::default()
        },
        mtu: Mtu::Mtu1024,
        buf_len: MIB,
        timeout: 14,
        retry_cnt: 7,
        sq_sig_all: true,
        selective_repeat: sr,
        cap: QpCap {
            max_send_wr: 64,
            ..QpCap::default()
        },
        ..PairOptions::default()
    };
    let mut p = Pair::new(&o);
    for i in 0..WRS {
        let wr = SendWr {
            remote_addr: p.b.addr(0),
            rkey: p.b.mr.rkey,
            ..SendWr::new(
                i,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![p.a.sge(0, MIB)].into()),
            )
        };
        p.post_send(0, wr);
    }
    let start = p.world.now;
    p.run();
    let took = p.world.now - start;
    let st = p.wcs(0).iter().map(|w| w.status).collect();
    let a = p.world.nodes[0].engine.qp_transport(p.a.qpn).expect("qp");
    let b = p.world.nodes[1].engine.qp_transport(p.b.qpn).expect("qp");
    (st, took, a, b, p.world.net.stats)
}

#[test]
fn cnps_keep_the_queue_near_the_mark_without_losing_pace() {
    for seed in 1..=3 {
        let (st, took, a, b, net) = stream(seed, 5_000_000, [true, true]);
        let (_, plain_took, plain, _, plain_net) = stream(seed, 0, [true, true]);
        let why = format!("seed {seed}: {a:?} {b:?} {net:?}; unmarked {plain:?} {plain_net:?}");
        assert!(
            st.len() == WRS as usize && st.iter().all(|s| *s == WcStatus::Success),
            "{why}"
        );
        assert!(
            b.cnps_sent > 0 && (1..=b.cnps_sent).contains(&a.cnps_received),
            "{why}"
        );
        assert!(net.ce_marked > 0 && net.queue_drops == 0, "{why}");
        // The RTT the requester measured stays near the path's plus the mark, where the
        // unmarked path's queue stands at the path's own length.
        let (srtt, plain_srtt) = (a.srtt.expect("srtt"), plain.srtt.expect("srtt"));
        assert!(srtt < RTT + 12_000_000, "{why}");
        assert!(plain_srtt > RTT + 20_000_000, "{why}");
        // The marks cost little pace.
        eprintln!("seed {seed}: {took} ns against {plain_took}, srtt {srtt} against {plain_srtt}");
        assert!(
            took < plain_took * 13 / 10,
            "{why}: {took} ns against {plain_took}"
        );
    }
}

#[test]
fn no_cnp_goes_to_a_peer_that_does_not_speak_selective_repeat() {
    // rxe knows no CNP: with a peer that never offered selective repeat, the marks are
    // left alone, and the wire carries what it carried before.
    let (st, _, a, b, net) = stream(1, 5_000_000, [false, true]);
    assert!(st.iter().all(|s| *s == WcStatus::Success), "{st:?}");
    assert!(net.ce_marked > 0, "{net:?}");
    assert_eq!((b.cnps_sent, a.cnps_received), (0, 0), "{a:?} {b:?}");
}
