//! The Rust API as a new user meets it (issue 59): a QP connects in one step from the
//! peer's endpoint (its PSN drawn at creation, carried in the endpoint's byte form with
//! the buffers the peer may use), typed work requests aimed at those buffers, and each
//! footgun of the C-shaped API an immediate `Err`. Over real UDP on loopback
//! (127.0.0.211-216).

mod common;
use common::wait;

use oxrdma::{
    Access, CompletionQueue, ConnectOptions, Context, Endpoint, MemoryRegion, QpCap, QpType,
    QueuePair, RecvWr, RemoteBuf, SendWr, WcOpcode, WcStatus,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Side {
    _ctx: Context,
    mr: MemoryRegion,
    cq: CompletionQueue,
    qp: QueuePair,
}

fn side(ip: &str) -> Side {
    let ctx = Context::open(ip.parse().unwrap()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(1 << 16, Access::ALL).unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    Side {
        _ctx: ctx,
        mr,
        cq,
        qp,
    }
}

/// `s`'s endpoint offering three buffers of its region (16 KiB each), as bytes.
fn offer(s: &Side) -> Vec<u8> {
    let all = s.mr.remote();
    (0..3)
        .fold(s.qp.endpoint(), |e, i| {
            e.with_buffer(all.slice(i * 16384..(i + 1) * 16384).unwrap())
        })
        .to_bytes()
}

#[test]
fn a_qp_connects_in_one_step_from_the_peers_endpoint_bytes() {
    let (a, b) = (side("127.0.0.211"), side("127.0.0.212"));
    // Each QP drew its PSN; its endpoint carries it.
    assert!(a.qp.psn() < 1 << 24 && b.qp.psn() < 1 << 24);
    assert_eq!(a.qp.endpoint().psn, a.qp.psn());
    // What travels between them is bytes; each connects from the other's.
    let (ea, eb) = (offer(&a), offer(&b));
    let (ea, eb) = (
        Endpoint::from_bytes(&ea).unwrap(),
        Endpoint::from_bytes(&eb).unwrap(),
    );
    assert_eq!(eb.buffers.len(), 3);
    a.qp.connect(&eb, &ConnectOptions::default()).unwrap();
    b.qp.connect(&ea, &ConnectOptions::default()).unwrap();

    // WRITE into b's second buffer, READ back from it, then atomics on its third.
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13 % 251) as u8).collect();
    a.mr.write(0, &data).unwrap();
    let w = SendWr::write(1, [a.mr.sge(0, data.len()).unwrap()], eb.buffers[1]).unwrap();
    a.qp.post_send(w).unwrap();
    wait(&a.cq, 1)[0].result().unwrap();
    let mut got = vec![0u8; data.len()];
    b.mr.read(16384, &mut got).unwrap();
    assert_eq!(got, data, "the WRITE landed in the second buffer");
    let back = eb.buffers[1].slice(5000..).unwrap();
    let r = SendWr::read(2, [a.mr.sge(20_000, 5000).unwrap()], back).unwrap();
    a.qp.post_send(r).unwrap();
    assert_eq!(
        wait(&a.cq, 1)[0].result().unwrap().opcode,
        WcOpcode::RdmaRead
    );
    let mut read = vec![0u8; 5000];
    a.mr.read(20_000, &mut read).unwrap();
    assert_eq!(read, data[5000..]);
    b.mr.write(32768, &40u64.to_ne_bytes()).unwrap();
    let fa = SendWr::atomic_fetch_add(3, a.mr.sge(40_000, 8).unwrap(), eb.buffers[2], 2);
    a.qp.post_send(fa.unwrap()).unwrap();
    let cas = SendWr::atomic_cas(4, a.mr.sge(40_008, 8).unwrap(), eb.buffers[2], 42, 7);
    a.qp.post_send(cas.unwrap()).unwrap();
    for wc in wait(&a.cq, 2) {
        wc.result().unwrap();
    }
    let mut v = [0u8; 8];
    b.mr.read(32768, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 7, "40 + 2, then 42 swapped for 7");

    // A WRITE with immediate consumes a receive; an unsignaled WRITE completes nothing.
    b.qp.post_recv(RecvWr {
        wr_id: 9,
        sges: vec![].into(),
    })
    .unwrap();
    let quiet = SendWr::write(5, [a.mr.sge(0, 8).unwrap()], eb.buffers[0]).unwrap();
    a.qp.post_send(quiet.unsignaled()).unwrap();
    let imm = SendWr::write(6, [a.mr.sge(0, 8).unwrap()], eb.buffers[0]).unwrap();
    a.qp.post_send(imm.with_imm(0xfeed).unwrap()).unwrap();
    let wcs = wait(&a.cq, 1);
    assert_eq!(wcs[0].wr_id, 6, "the unsignaled WRITE completed nothing");
    let rx = wait(&b.cq, 1);
    assert_eq!((rx[0].wr_id, rx[0].imm), (9, Some(0xfeed)));
    assert_eq!(rx[0].status, WcStatus::Success);
}

#[test]
fn a_psn_set_for_interop_is_used_and_checked() {
    let (a, b) = (side("127.0.0.213"), side("127.0.0.214"));
    // PSNs about to wrap: a 3-packet message crosses 0xffffff.
    a.qp.set_psn(0xff_fffe).unwrap();
    b.qp.set_psn(0xff_ffff).unwrap();
    assert!(a.qp.set_psn(1 << 24).is_err(), "24 bits");
    assert_eq!(a.qp.endpoint().psn, 0xff_fffe);
    a.qp.connect(&b.qp.endpoint(), &ConnectOptions::default())
        .unwrap();
    b.qp.connect(&a.qp.endpoint(), &ConnectOptions::default())
        .unwrap();
    let data = vec![0x3c; 3 * 4096];
    a.mr.write(0, &data).unwrap();
    let w = SendWr::write(1, [a.mr.sge(0, data.len()).unwrap()], b.mr.remote()).unwrap();
    a.qp.post_send(w).unwrap();
    wait(&a.cq, 1)[0].result().unwrap();
    let mut got = vec![0u8; data.len()];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // A secure endpoint names its PSN in its keys: the PSN is set before it, not after.
    let c = side("127.0.0.215");
    c.qp.secure_endpoint().unwrap();
    assert!(c.qp.set_psn(5).is_err());
}

#[test]
fn each_footgun_is_an_immediate_error() {
    let s = side("127.0.0.216");
    let len = s.mr.len();
    // Region reads and writes out of range: an error, and nothing copied.
    s.mr.write(len - 4, &[1, 2, 3, 4]).unwrap();
    assert!(s.mr.write(len - 3, &[9; 4]).is_err());
    let mut four = [0u8; 4];
    s.mr.read(len - 4, &mut four).unwrap();
    assert_eq!(four, [1, 2, 3, 4], "the refused write changed nothing");
    assert!(s.mr.read(len - 3, &mut four).is_err());
    assert!(s.mr.write(usize::MAX, &[1]).is_err(), "no overflow");
    // SGEs: inside the region, and no silent truncation to 32 bits.
    assert!(s.mr.sge(len - 8, 8).is_ok());
    assert!(s.mr.sge(len - 8, 9).is_err());
    assert!(s.mr.sge(0, (1usize << 32) + 8).is_err());
    // A WRITE or READ longer than the buffer it aims at; an atomic off its alignment.
    let small = RemoteBuf::new(0x1000, 77, 64).unwrap();
    let sge = s.mr.sge(0, 65).unwrap();
    assert!(SendWr::write(1, [sge], small).is_err());
    assert!(SendWr::read(1, [sge], small).is_err());
    let eight = s.mr.sge(0, 8).unwrap();
    assert!(SendWr::atomic_cas(1, eight, small.slice(4..).unwrap(), 0, 1).is_err());
    assert!(SendWr::atomic_fetch_add(1, s.mr.sge(0, 4).unwrap(), small, 1).is_err());
    // A READ carries no immediate.
    let read = SendWr::read(1, [eight], small).unwrap();
    assert!(read.with_imm(3).is_err());
    // Access is a typed set: a bit oxrdma does not name is no flag.
    assert!(Access::from_bits(1 << 20).is_none());
    assert_eq!(
        Access::REMOTE,
        Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
    );
    // The rkey travels with the buffer: no WR built this way lacks it.
    let w = SendWr::write(2, [eight], small).unwrap();
    assert_eq!((w.remote_addr, w.rkey), (0x1000, 77));
}

#[test]
fn wait_loses_no_wakeup_when_completions_race_the_sleep() {
    // Each round a SEND leaves after a short, seeded pause, while the receiver is on its
    // way into `wait_one`: before its arm, between arm and sleep, or asleep. A lost wakeup
    // shows as a round that waits out its timeout.
    let seed = common::clock_seed();
    let (a, b) = (side("127.0.0.219"), side("127.0.0.220"));
    a.qp.connect(&b.qp.endpoint(), &ConnectOptions::default())
        .unwrap();
    b.qp.connect(&a.qp.endpoint(), &ConnectOptions::default())
        .unwrap();
    let rounds = 2000u64;
    let recv = |i| {
        b.qp.post_recv(RecvWr {
            wr_id: i,
            sges: vec![b.mr.sge(0, 8).unwrap()].into(),
        })
        .unwrap()
    };
    (0..16).for_each(recv);
    let taken = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| common::send_racing(&a.qp, &a.cq, rounds, seed, &taken));
        for i in 0..rounds {
            let wc =
                b.cq.wait_one(Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("seed {seed}: round {i}: {e}"));
            assert_eq!(wc.wr_id, i, "seed {seed}");
            recv(i + 16);
            taken.store(i + 1, Ordering::Release);
        }
    });
    println!("{rounds} rounds in {:?}", start.elapsed());
}
