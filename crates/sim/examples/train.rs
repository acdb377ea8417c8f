//! The engines' own cost of a stream of 64 KiB RDMA WRITEs (or READs) at RoCE MTU 1024 (a
//! LAN's path), as `oxrdma perf write-bw` runs it but with no sockets: the engine with the
//! data builds the packets (WRITE trains, or READ responses), the other takes each burst's
//! packets as the driver hands them over (one GRO message of one peer), and the ACKs (or
//! requests) go back. Prints nanoseconds per data packet on each side; run it under
//! callgrind to see where the instructions go.
//!   cargo run --release -p oxrdma-sim --example train -- 2000 [per-packet] [read]
//! `per-packet` builds each packet on its own (`Engine::set_send_runs(false)`) and hands
//! each over on its own (`Engine::handle_packet_ecn`): the references the run paths are
//! measured against.

use oxrdma_core::{Gid, SendData, SendFlags, SendWr, WcStatus, WrOpcode, MAX_PACKET};
use oxrdma_sim::{Pair, PairOptions};
use std::time::{Duration, Instant};

const MSG: usize = 64 << 10;

fn main() {
    let mut args = std::env::args().skip(1);
    let iters: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let args: Vec<String> = args.collect();
    let per_packet = args.iter().any(|a| a == "per-packet");
    let read = args.iter().any(|a| a == "read");
    // Which node sends the data packets.
    let data_from = usize::from(read);
    let mut p = Pair::new(&PairOptions::default());
    for n in &mut p.world.nodes {
        n.engine.set_send_runs(!per_packet);
    }
    let gids = [0, 1].map(|n| Gid::from(p.world.nodes[n].ip));
    let mut slots = vec![0u8; 64 * MAX_PACKET];
    let mut lens = Vec::new();
    let mut now = p.world.now;
    let (mut received, mut receiving, mut sending) = (0u64, Duration::ZERO, Duration::ZERO);
    for i in 0..iters {
        let mut wr = SendWr::new(
            i,
            if read {
                WrOpcode::RdmaRead
            } else {
                WrOpcode::RdmaWrite
            },
            SendData::Sges(vec![p.a.sge(0, MSG)].into()),
        );
        wr.remote_addr = p.b.addr(0);
        wr.rkey = p.b.mr.rkey;
        wr.flags = SendFlags::SIGNALED;
        p.world.nodes[0]
            .engine
            .post_send(p.a.qpn, wr)
            .expect("post");
        loop {
            now += 1_000;
            let mut moved = false;
            for (s, d) in [(0, 1), (1, 0)] {
                lens.clear();
                let started = Instant::now();
                p.world.nodes[s]
                    .engine
                    .poll_transmit_many(now, &mut slots, |t| lens.push(t.len));
                if s == data_from {
                    sending += started.elapsed();
                }
                moved |= !lens.is_empty();
                let mut at = 0;
                let packets = lens.iter().map(|&n| {
                    at += n;
                    &slots[at - n..at]
                });
                let started = Instant::now();
                let e = &mut p.world.nodes[d].engine;
                if per_packet {
                    packets.for_each(|data| e.handle_packet_ecn(now, gids[s], data, false));
                } else {
                    e.handle_packets(now, gids[s], false, packets);
                }
                if s == data_from {
                    received += lens.len() as u64;
                    receiving += started.elapsed();
                }
            }
            if !moved {
                break;
            }
        }
        let wcs = p.world.nodes[0].engine.poll_cq(p.a.cq, 16).expect("cq");
        assert!(
            wcs.iter().all(|wc| wc.status == WcStatus::Success),
            "{wcs:?}"
        );
    }
    let per = |d: Duration| d.as_nanos() as u64 / received.max(1);
    println!(
        "{received} packets, {} ns each to build (sending engine), {} ns to take (receiving)",
        per(sending),
        per(receiving)
    );
}
