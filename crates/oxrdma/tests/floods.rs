//! ReDMArk's A5 (degrading a victim by floods) on loopback: a device serves its legitimate
//! peer's 8 B RDMA WRITEs (its application does nothing; its engine thread answers) while
//! an attacker floods it with 100,000 packets: junk, SENDs that find no receive (an RNR
//! storm), and duplicates of one 64 KiB READ. The attacker is the peer of a second QP of
//! the victim (so it knows that QP's PSNs), writing packets by hand from its own address.
//! Every flood packet is accounted for (counted by its reason, or dropped by the kernel and
//! counted as such); the legitimate WRITEs all complete, and their delays during each flood
//! are printed beside the same without one, with what the victim sent back.
//! Alone in its test binary: the timings must not share the cores with other tests.

mod common;
use common::packet;

use oxrdma::{
    Access, CompletionQueue, ConnectOptions, Context, Counter, Counters, Endpoint, Gid, QpCap,
    QpType, QueuePair, SendData, SendFlags, SendWr, WcStatus, WrOpcode,
};
use oxrdma_wire::{ExtHeaders, Opcode, RethRepr};
use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VICTIM: &str = "127.0.0.151";
const PEER: &str = "127.0.0.152";
const ATTACKER: &str = "127.0.0.153";
/// The attacker's QPN and first PSN, as it told the victim.
const ATT_QPN: u32 = 0x0a_bcde;
const ATT_PSN: u32 = 0x10_0000;
/// The flood: 100,000 packets; a fifth in a debug build (CI's AddressSanitizer run), where
/// every packet costs the victim several times more.
const FLOOD: u64 = if cfg!(debug_assertions) {
    20_000
} else {
    100_000
};
/// The READ the attacker asks for again and again.
const READ_LEN: u32 = 64 << 10;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

struct Side {
    ctx: Context,
    cq: CompletionQueue,
    qp: QueuePair,
}

struct Victim {
    side: Side,
    /// Its QP whose peer is the attacker.
    attacked: QueuePair,
    /// The region the peer writes and the attacker reads.
    addr: u64,
    rkey: u32,
    _mr: oxrdma::MemoryRegion,
}

fn setup() -> (Victim, Side) {
    let v = Context::open(ip(VICTIM)).unwrap();
    let p = Context::open(ip(PEER)).unwrap();
    let (pv, pp) = (v.alloc_pd().unwrap(), p.alloc_pd().unwrap());
    let (cv, cp) = (v.create_cq(256).unwrap(), p.create_cq(256).unwrap());
    let qv = pv
        .create_qp(&cv, &cv, QpType::Rc, QpCap::default())
        .unwrap();
    let qp = pp
        .create_qp(&cp, &cp, QpType::Rc, QpCap::default())
        .unwrap();
    // Patient: a WRITE may wait behind the whole flood's backlog (a second per try, not
    // the default 67 ms: a victim that serves its peer late still serves it).
    let o = ConnectOptions {
        timeout: 18,
        ..ConnectOptions::default()
    };
    qv.connect(&qp.endpoint(), &o).unwrap();
    qp.connect(&qv.endpoint(), &o).unwrap();
    // The attacker's connection: a QP of the victim's whose peer is the attacker's address.
    let attacked = pv
        .create_qp(&cv, &cv, QpType::Rc, QpCap::default())
        .unwrap();
    let attacker = Endpoint {
        gid: Gid::from(ip(ATTACKER)),
        qpn: ATT_QPN,
        psn: ATT_PSN,
        key: None,
        buffers: Vec::new(),
    };
    attacked
        .connect(&attacker, &ConnectOptions::default())
        .unwrap();
    let mr = pv.register(1 << 20, Access::ALL).unwrap();
    let victim = Victim {
        side: Side {
            ctx: v,
            cq: cv,
            qp: qv,
        },
        attacked,
        addr: mr.addr(),
        rkey: mr.rkey(),
        _mr: mr,
    };
    (victim, Side { ctx: p, cq: cp, qp })
}

/// The delays of the peer's signaled 8 B WRITEs into the victim, one at a time: `n` of
/// them, and then more until `done` is set.
fn writes(peer: &Side, v: &Victim, n: usize, done: &AtomicBool) -> Vec<Duration> {
    let mut delays = Vec::new();
    let mut wcs = Vec::new();
    while delays.len() < n || !done.load(Ordering::Acquire) {
        let mut w = SendWr::new(
            delays.len() as u64,
            WrOpcode::RdmaWrite,
            SendData::Inline(vec![1; 8].into()),
        );
        w.flags = SendFlags::SIGNALED;
        (w.remote_addr, w.rkey) = (v.addr, v.rkey);
        let start = Instant::now();
        peer.qp.post_send(w).unwrap();
        wcs.clear();
        let deadline = start + Duration::from_secs(30);
        while wcs.is_empty() {
            peer.cq.poll(&mut wcs, 1).unwrap();
            assert!(
                Instant::now() < deadline,
                "a legitimate WRITE never completed"
            );
        }
        assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
        delays.push(start.elapsed());
    }
    delays
}

/// (median, 99th percentile, worst) in µs.
fn spread(mut d: Vec<Duration>) -> (u128, u128, u128) {
    d.sort_unstable();
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize].as_micros();
    (at(0.5), at(0.99), at(1.0))
}

/// What moved on the victim between two snapshots.
fn moved(before: &Counters, after: &Counters, c: Counter) -> u64 {
    after[c] - before[c]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Flood {
    /// Packets that do not parse, or name no QP.
    Junk,
    /// SENDs at the attacked QP's expected PSN, which has no receive posted.
    RnrStorm,
    /// One 64 KiB READ, then the same request again and again.
    DuplicateReads,
}

impl Flood {
    /// The packets, built before the clock starts.
    fn packets(self, v: &Victim) -> Vec<Vec<u8>> {
        let qpn = v.attacked.qpn();
        (0..FLOOD)
            .map(|i| match self {
                Flood::Junk if i % 2 == 0 => vec![0xff; 40],
                Flood::Junk => packet(
                    Opcode::RC_SEND_ONLY,
                    0xdead,
                    0,
                    ExtHeaders::default(),
                    b"junk",
                ),
                Flood::RnrStorm => packet(
                    Opcode::RC_SEND_ONLY,
                    qpn,
                    ATT_PSN,
                    ExtHeaders::default(),
                    b"x",
                ),
                Flood::DuplicateReads => {
                    let reth = RethRepr {
                        virtual_address: v.addr,
                        rkey: v.rkey,
                        dma_length: READ_LEN,
                    };
                    let ext = ExtHeaders {
                        reth: Some(reth),
                        ..ExtHeaders::default()
                    };
                    packet(Opcode::RC_RDMA_READ_REQUEST, qpn, ATT_PSN, ext, &[])
                }
            })
            .collect()
    }

    /// The counters its packets are counted under: the device's for junk, the attacked
    /// QP's otherwise (the legitimate QP may see duplicates of its own meanwhile).
    fn counted(self, dev: (&Counters, &Counters), qp: (&Counters, &Counters)) -> u64 {
        let d = |c| moved(dev.0, dev.1, c);
        let q = |c| moved(qp.0, qp.1, c);
        match self {
            Flood::Junk => d(Counter::Malformed) + d(Counter::UnknownQp),
            Flood::RnrStorm => q(Counter::SendRnrErr) + q(Counter::RnrNakLimited),
            // The first READ is executed; the others are duplicates.
            Flood::DuplicateReads => {
                q(Counter::RcvdReadRequest).min(1) + q(Counter::DuplicateRequest)
            }
        }
    }
}

#[test]
fn floods_are_counted_and_legitimate_writes_go_on() {
    let (victim, peer) = setup();
    let attacker = UdpSocket::bind((ip(ATTACKER), 0)).unwrap();
    let to = (ip(VICTIM), oxrdma_wire::ROCE_V2_PORT);
    let calm = spread(writes(&peer, &victim, 2_000, &AtomicBool::new(true)));
    println!(
        "without a flood: legitimate 8 B WRITE median {} us, p99 {} us, worst {} us",
        calm.0, calm.1, calm.2
    );
    for flood in [Flood::Junk, Flood::RnrStorm, Flood::DuplicateReads] {
        let packets = flood.packets(&victim);
        let started = Instant::now();
        let before = victim.side.ctx.counters();
        let qp_before = victim.attacked.counters().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let a = attacker.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let start = Instant::now();
            for p in &packets {
                let _ = a.send_to(p, to);
            }
            d.store(true, Ordering::Release);
            start.elapsed()
        });
        let during = writes(&peer, &victim, 20, &done);
        let took = sender.join().unwrap();
        // A few more WRITEs: their arrival reports the kernel's drops of the flood.
        writes(&peer, &victim, 20, &AtomicBool::new(true));
        std::thread::sleep(Duration::from_millis(200));
        let after = victim.side.ctx.counters();
        let qp_after = victim.attacked.counters().unwrap();
        let counted = flood.counted((&before, &after), (&qp_before, &qp_after));
        let overflow = moved(&before, &after, Counter::RxqOverflow);
        let (med, p99, worst) = spread(during.clone());
        println!(
            "{flood:?}: {FLOOD} packets in {} ms; counted {counted}, dropped by the kernel \
             (receive buffer full) {overflow}; the victim sent {} packets, {} KiB (the \
             legitimate ACKs included; {} READ response packets, {} RNR NAKs and {} requests \
             not NAKed again, {} duplicate READs not answered); {} legitimate WRITEs \
             meanwhile: median {med} us, p99 {p99} us, worst {worst} us",
            took.as_millis(),
            moved(&before, &after, Counter::SentPkts),
            moved(&before, &after, Counter::SentBytes) >> 10,
            moved(&before, &after, Counter::SentReadResponse),
            moved(&before, &after, Counter::SendRnrErr),
            moved(&before, &after, Counter::RnrNakLimited),
            moved(&before, &after, Counter::DuplicateReadLimited),
            during.len(),
        );
        // Every packet is accounted for: counted by its reason, or by the kernel's drop
        // (which may also have taken some of the legitimate packets, resent since).
        assert!(counted <= FLOOD, "{flood:?}: {counted} counted");
        assert!(
            counted + overflow >= FLOOD,
            "{flood:?}: {counted} + {overflow}"
        );
        if flood == Flood::DuplicateReads {
            // Answered again from the QP's budget (PeerLimits::dup_read_bytes_per_sec,
            // 16 MiB/s, a second's worth at first): not 100,000 times 64 KiB. Responses
            // are 4096 B (the connection's MTU).
            let answered = moved(&before, &after, Counter::SentReadResponse) * 4096;
            let secs = started.elapsed().as_secs_f64();
            let budget = (16 << 20) as f64 * (1.0 + secs) + 2.0 * f64::from(READ_LEN);
            println!(
                "  duplicate READs answered: {} KiB in {secs:.2} s (budget {} KiB)",
                answered >> 10,
                budget as u64 >> 10
            );
            assert!(answered as f64 <= budget, "{answered} B answered again");
        }
        // A legitimate request waits behind the flood's backlog in the socket, never
        // longer than its retries allow (each completed: `writes`).
        assert!(worst < 7_000_000, "{flood:?}: a WRITE waited {worst} us");
        // Nothing of the flood reached the legitimate QP or the region.
        assert_eq!(victim.side.qp.state().unwrap(), oxrdma::QpState::Rts);
        let mut wcs = Vec::new();
        victim.side.cq.poll(&mut wcs, 16).unwrap();
        assert!(wcs.is_empty(), "{flood:?}: {wcs:?}");
    }
}
