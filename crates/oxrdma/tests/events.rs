//! Programs that sleep on completion channels: a waiting thread moves the packets that wake
//! it itself (one wake-up per message, as a blocking socket), over real UDP on loopback.

use oxrdma::{
    Access, CompletionChannel, CompletionQueue, ConnectOptions, Context, MemoryRegion, QpCap,
    QpType, QueuePair, RecvWr, SendData, SendWr, WcStatus, WrOpcode,
};
use std::time::Duration;

/// One end of an event-driven SEND ping-pong: its CQ reports to its channel.
struct End {
    _ctx: Context,
    _pd: oxrdma::ProtectionDomain,
    mr: MemoryRegion,
    cq: CompletionQueue,
    ch: CompletionChannel,
    qp: QueuePair,
}

fn end(ip: &str) -> End {
    let ctx = Context::open(ip.parse().unwrap()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(4096, Access::ALL).unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    End {
        _ctx: ctx,
        _pd: pd,
        mr,
        cq,
        ch,
        qp,
    }
}

fn pair(a: &str, b: &str) -> (End, End) {
    let (a, b) = (end(a), end(b));
    let opts = ConnectOptions::default();
    a.qp.connect(&b.qp.endpoint(), &opts).unwrap();
    b.qp.connect(&a.qp.endpoint(), &opts).unwrap();
    (a, b)
}

impl End {
    fn post_recv(&self) {
        let sges = vec![self.mr.sge(0, 8).unwrap()].into();
        self.qp.post_recv(RecvWr { wr_id: 0, sges }).unwrap();
    }

    fn send(&self, round: u64) {
        let data = SendData::Inline(round.to_le_bytes().to_vec().into());
        self.qp
            .post_send(SendWr::new(round, WrOpcode::Send, data))
            .unwrap();
    }

    /// Sleeps on the channel until the message of `round` is received (perftest -e's
    /// loop: take the event, re-arm, poll), and posts the next receive.
    fn receive(&self, round: u64) {
        loop {
            assert!(
                self.ch.wait(Duration::from_secs(10)).unwrap(),
                "round {round}: no event in 10 s"
            );
            self.cq.req_notify(&self.ch).unwrap();
            let mut wcs = Vec::new();
            self.cq.poll(&mut wcs, 8).unwrap();
            for wc in &wcs {
                assert_eq!(wc.status, WcStatus::Success, "round {round}: {wc:?}");
            }
            if wcs.iter().any(|w| w.opcode == oxrdma::WcOpcode::Recv) {
                let mut got = [0u8; 8];
                self.mr.read(0, &mut got).unwrap();
                assert_eq!(u64::from_le_bytes(got), round, "the message's bytes");
                self.post_recv();
                return;
            }
        }
    }
}

/// A ping-pong with both ends sleeping on their channels, the answer delayed by `pause`
/// each round; what each channel's waiters did.
fn ping_pong(a: &str, b: &str, rounds: u64, pause: Duration) -> [oxrdma::ChannelStats; 2] {
    let (a, b) = pair(a, b);
    for e in [&a, &b] {
        e.post_recv();
        e.cq.req_notify(&e.ch).unwrap();
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            for r in 0..rounds {
                b.receive(2 * r);
                std::thread::sleep(pause);
                b.send(2 * r + 1);
            }
        });
        for r in 0..rounds {
            a.send(2 * r);
            a.receive(2 * r + 1);
        }
    });
    [a.ch.stats(), b.ch.stats()]
}

/// Each end's events come from its own waiting thread moving the packet that woke it (or
/// that it polled for), not from the engine thread, which woke first and then signalled
/// the channel: two wake-ups per message (qperf's rc_lat 1.7-1.9x tcp_lat).
#[test]
fn a_thread_sleeping_on_its_channel_moves_its_own_packets() {
    let stats = ping_pong("127.0.0.101", "127.0.0.102", 300, Duration::ZERO);
    for (end, s) in ["a", "b"].iter().zip(stats) {
        assert!(s.events >= 300, "{end}: {s:?}");
        assert!(
            s.moved_by_waiter * 2 >= s.events,
            "{end}: most events must come from the waiter itself: {s:?}"
        );
    }
}

/// The same with a peer that answers after 300 us: the waiters sleep (their events came
/// too late lately for a spin to pay) and the packet wakes them.
#[test]
fn a_packet_wakes_the_thread_sleeping_on_the_channel() {
    let stats = ping_pong(
        "127.0.0.103",
        "127.0.0.104",
        100,
        Duration::from_micros(300),
    );
    let s = stats[0];
    assert!(s.slept >= 50, "a must have slept: {s:?}");
    assert!(
        s.moved_by_waiter * 2 >= s.events,
        "the packet must wake the waiter, which moves it: {s:?}"
    );
}
