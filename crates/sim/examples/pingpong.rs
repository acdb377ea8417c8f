//! The engine's own cost of an 8 B RDMA WRITE ping-pong, as `oxrdma perf write-lat` runs
//! it but with no sockets: two engines in one thread hand each other their packets, and
//! each side writes back once the other's write has landed. Prints nanoseconds per round
//! trip; run it under callgrind to see where an engine's instructions go.
//!   cargo run --release -p oxrdma-sim --example pingpong -- 100000 [idle]

use oxrdma_core::{Gid, InlineData, SendData, SendFlags, SendWr, WrOpcode, MAX_PACKET};
use oxrdma_sim::{Pair, PairOptions};
use std::time::Instant;

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // OXRDMA_SELECTIVE_REPEAT=0: go-back-N, as with rxe.
    let sr = std::env::var("OXRDMA_SELECTIVE_REPEAT").map_or(true, |v| v != "0");
    let mut p = Pair::new(&PairOptions {
        selective_repeat: [sr; 2],
        ..PairOptions::default()
    });
    let gids = [0, 1].map(|n| Gid::from(p.world.nodes[n].ip));
    let mut buf = vec![0u8; MAX_PACKET];
    let mut now = p.world.now;
    let started = Instant::now();
    for i in 0..iters {
        for (from, to) in [(0, 1), (1, 0)] {
            let (me, peer) = if from == 0 {
                (&p.a, &p.b)
            } else {
                (&p.b, &p.a)
            };
            // Inline, as perf write-lat posts 8 bytes (its -I defaults to 64).
            let mut wr = SendWr::new(
                i,
                WrOpcode::RdmaWrite,
                SendData::Inline(InlineData::from_elem(i as u8, 8)),
            );
            wr.remote_addr = peer.addr(0);
            wr.rkey = peer.mr.rkey;
            wr.flags = SendFlags::SIGNALED | SendFlags::INLINE;
            let (cq, qpn) = (me.cq, me.qpn);
            p.world.nodes[from].engine.post_send(qpn, wr).expect("post");
            // Everything either side has to send, until both are quiet.
            loop {
                now += 1_000;
                let mut moved = false;
                for (s, d) in [(from, to), (to, from)] {
                    while let Some(t) = p.world.nodes[s].engine.poll_transmit(now, &mut buf) {
                        p.world.nodes[d]
                            .engine
                            .handle_packet(now, gids[s], &buf[..t.len]);
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
            // The ACK of this write waits on the peer for its next request, as in a
            // ping-pong: the completion comes a round later.
            p.world.nodes[from]
                .engine
                .poll_cq_each(cq, 16, |_| {})
                .expect("cq");
        }
    }
    let ns = started.elapsed().as_nanos() as u64 / iters;
    println!("{iters} round trips, {ns} ns each (engine work only)");
    if std::env::args().nth(2).as_deref() != Some("idle") {
        return;
    }
    // What a poller pays on each empty turn: nothing to send, no timer due.
    let e = &mut p.world.nodes[0].engine;
    let started = Instant::now();
    let mut due = 0;
    for _ in 0..iters * 10 {
        e.poll_transmit_many(now, &mut buf, |_| {});
        due += usize::from(e.poll_timeout().is_some_and(|t| t <= now));
    }
    let idle = started.elapsed().as_nanos() as u64 / (iters * 10);
    println!("{idle} ns per empty poll ({due} found a timer due)");
}
