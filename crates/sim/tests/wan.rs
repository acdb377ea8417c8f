//! Long, lossy paths in the simulator: a 50 ms round trip at 200 Mbit/s through a
//! tail-drop router queue of 100 ms, with rxe's default retry_cnt 7 and perftest's ACK
//! timeout 14 (67 ms). A reliable transport must not give up on a path that delivers:
//! every WR completes at 0.1 % to 10 % loss. A path that delivers nothing ends the first
//! WR with RETRY_EXC once the budget is spent (8 ACK timeouts), and the rest are flushed.

use oxrdma_core::{Mtu, QpCap, SendData, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::{NetConfig, Pair, PairOptions};

const RTT: u64 = 50_000_000;

/// The path, and QPs as perftest sets them up (timeout 14, retry_cnt 7), with buffers of
/// `len` bytes.
fn path(seed: u64, loss: f64, len: usize) -> PairOptions {
    PairOptions {
        seed,
        net: NetConfig {
            loss,
            delay: RTT / 2,
            bandwidth_bps: 200_000_000,
            queue_limit: 100_000_000,
            ..NetConfig::default()
        },
        mtu: Mtu::Mtu1024,
        buf_len: len,
        timeout: 14,
        retry_cnt: 7,
        sq_sig_all: true,
        cap: QpCap {
            max_send_wr: 64,
            ..QpCap::default()
        },
        ..PairOptions::default()
    }
}

/// `wrs` RDMA WRITEs of `len` bytes over the path: their statuses and how long the
/// transfer took (virtual time). `partition`: the path delivers nothing from the start.
fn wan(seed: u64, loss: f64, wrs: u64, len: usize, partition: bool) -> (Vec<WcStatus>, u64) {
    let mut o = path(seed, loss, len);
    if partition {
        o.net.partitions = vec![(0, u64::MAX)];
    }
    let mut p = Pair::new(&o);
    for i in 0..wrs {
        let wr = SendWr {
            remote_addr: p.b.addr(0),
            rkey: p.b.mr.rkey,
            ..SendWr::new(
                i,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![p.a.sge(0, len)].into()),
            )
        };
        p.post_send(0, wr);
    }
    let start = p.world.now;
    p.run();
    let took = p.world.now - start;
    (p.wcs(0).iter().map(|w| w.status).collect(), took)
}

#[test]
fn every_write_completes_on_a_long_path_that_loses_up_to_ten_percent() {
    for (loss, wrs, len) in [
        (0.001, 8, 1 << 20),
        (0.01, 8, 1 << 20),
        (0.05, 4, 256 << 10),
        (0.1, 4, 64 << 10),
    ] {
        for seed in 1..=3 {
            let (st, took) = wan(seed, loss, wrs, len, false);
            assert_eq!(st.len(), wrs as usize, "seed {seed} loss {loss}: {st:?}");
            assert!(
                st.iter().all(|s| *s == WcStatus::Success),
                "seed {seed} loss {loss}: {st:?} after {} ms",
                took / 1_000_000
            );
        }
    }
}

#[test]
fn a_path_that_delivers_nothing_fails_the_write_after_the_retry_budget() {
    let (st, took) = wan(1, 0.0, 3, 64 << 10, true);
    assert_eq!(st[0], WcStatus::RetryExcErr, "{st:?}");
    assert!(st[1..].iter().all(|s| *s == WcStatus::WrFlushErr), "{st:?}");
    // 8 ACK timeouts of 67 ms (the first send and 7 retries), and not much more.
    let budget = 8 * 4096 * (1u64 << 14);
    assert!(
        took >= budget && took < budget * 3 / 2,
        "RETRY_EXC after {} ms, budget {} ms",
        took / 1_000_000,
        budget / 1_000_000
    );
}

/// 64 WRITEs of 1 MiB over the path at `loss`, from `seed`: how long they took, request
/// packets sent, and the packets the data needs.
fn stream(seed: u64, loss: f64, selective_repeat: bool) -> (u64, u64, u64) {
    let o = PairOptions {
        selective_repeat: [selective_repeat; 2],
        ..path(seed, loss, 1 << 20)
    };
    let mut p = Pair::new(&o);
    for i in 0..64 {
        let wr = SendWr {
            remote_addr: p.b.addr(0),
            rkey: p.b.mr.rkey,
            ..SendWr::new(
                i,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![p.a.sge(0, 1 << 20)].into()),
            )
        };
        p.post_send(0, wr);
    }
    let start = p.world.now;
    p.run();
    let took = p.world.now - start;
    let wcs = p.wcs(0);
    assert_eq!(wcs.len(), 64, "seed {seed} loss {loss}");
    assert!(
        wcs.iter().all(|w| w.status == WcStatus::Success),
        "seed {seed} loss {loss}"
    );
    let t = p.world.nodes[0].engine.qp_transport(p.a.qpn).expect("qp");
    (took, t.packets_sent, 64 * 1024)
}

#[test]
fn selective_repeat_sends_what_was_lost_and_keeps_the_pace() {
    // Lossless, the stream takes its time at 200 Mbit/s; at up to 5 % loss, only the lost
    // packets go again (bytes sent / bytes the data needs within 1.05 at 1 %: the must-hold
    // of issue 37), and the stream takes hardly longer. Go-back-N, at 1 %, resends whole
    // windows: the same bound fails it.
    let (base, _, _) = stream(1, 0.0, true);
    for (loss, max_ratio) in [(0.001, 1.01), (0.01, 1.05), (0.05, 1.1)] {
        for seed in 1..=3 {
            let (took, sent, need) = stream(seed, loss, true);
            let ratio = sent as f64 / need as f64;
            assert!(
                ratio <= max_ratio,
                "seed {seed} loss {loss}: sent {ratio:.3}x the data"
            );
            assert!(
                took < base * 6 / 5,
                "seed {seed} loss {loss}: {} ms against {} ms lossless",
                took / 1_000_000,
                base / 1_000_000
            );
        }
    }
    let (_, sent, need) = stream(1, 0.01, false);
    assert!(
        sent as f64 / need as f64 > 1.05,
        "go-back-N resends windows"
    );
}
