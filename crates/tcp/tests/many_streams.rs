//! Many iWARP QPs on two engines, each engine's streams driven by one `Streams`, which
//! visits only the streams with something to do (a ready socket, a QP that took work or
//! moved, a nudge due): WRITEs, READs and SENDs posted in seeded random batches on random
//! QPs, either way, each completing once with its bytes intact. The seed is printed on
//! failure (`OXRDMA_SEED=` to run it again).

mod common;

use oxrdma_core::iwarp::SetupConfig;
use oxrdma_core::{
    Access, Engine, MemoryRegion, QpCap, RecvWr, SendData, SendFlags, SendWr, Sge, SharedBuffer,
    WcStatus, WorkCompletion, WrOpcode,
};
use oxrdma_tcp::{mpa, Request, Streams};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAIRS: usize = 24;
/// Each pair's part of the regions.
const PART: usize = 64 << 10;
const SECS: Duration = Duration::from_secs(10);

struct End {
    e: Engine,
    streams: Streams,
    qpns: Vec<u32>,
    cq: u32,
    mr: MemoryRegion,
    buf: Arc<SharedBuffer>,
}

fn end(n: u8, rng: &mut u64) -> End {
    let mut e = common::engine(n);
    let pd = e.alloc_pd().unwrap();
    let cq = e.create_cq(4096).unwrap();
    let buf = Arc::new(SharedBuffer::new(PAIRS * PART).unwrap());
    let pattern: Vec<u8> = (0..PAIRS * PART).map(|_| next(rng) as u8).collect();
    assert!(buf.write(0, &pattern));
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qpns = (0..PAIRS)
        .map(|_| common::qp_in_init(&mut e, pd, cq, cq, cap))
        .collect();
    End {
        e,
        streams: Streams::new().unwrap(),
        qpns,
        cq,
        mr,
        buf,
    }
}

/// xorshift64*: the test's own seeded randomness.
fn next(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

impl End {
    fn bytes(&self, at: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        assert!(self.buf.read(at, &mut v));
        v
    }

    fn sge(&self, at: usize, len: usize) -> Sge {
        Sge {
            addr: self.mr.iova + at as u64,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }
}

/// Every pair connected over loopback: `a`'s QP `i` initiated, `b`'s accepted.
fn connected(rng: &mut u64) -> (End, End) {
    let (mut a, mut b) = (end(171, rng), end(172, rng));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    for i in 0..PAIRS {
        let t = std::thread::spawn(move || mpa::connect(addr, SetupConfig::default(), SECS));
        let (sock, _) = l.accept().unwrap();
        let est = Request::read(sock, SetupConfig::default(), SECS)
            .unwrap()
            .accept()
            .unwrap();
        b.e.iwarp_established(b.qpns[i], &est.stream()).unwrap();
        b.streams.attach(b.qpns[i], est.sock, &est.early).unwrap();
        let est = t.join().unwrap().unwrap();
        a.e.iwarp_established(a.qpns[i], &est.stream()).unwrap();
        a.streams.attach(a.qpns[i], est.sock, &est.early).unwrap();
    }
    (a, b)
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Write,
    Read,
    Send,
}

/// One operation of a batch: on pair `pair`, from `a` to `b` or back, over `at..at+len`
/// of the pair's part (the same offsets both sides).
#[derive(Debug, Clone, Copy)]
struct Planned {
    op: Op,
    pair: usize,
    a_to_b: bool,
    at: usize,
    len: usize,
}

#[test]
fn random_work_on_many_streams_completes_once_each_with_its_bytes() {
    let seed: u64 = std::env::var("OXRDMA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |p| {
        eprintln!("many_streams: OXRDMA_SEED={seed}");
        hook(p)
    }));
    let mut rng = seed;
    let (mut a, mut b) = connected(&mut rng);
    let mut wr_id = 0u64;
    for batch in 0..120 {
        // Now and then every stream has been idle long enough to be cold (a driver's pass
        // reads streams that moved bytes in the last millisecond whatever epoll says).
        if batch % 10 == 0 {
            std::thread::sleep(Duration::from_millis(3));
        }
        // A few pairs at once, each once, the rest idle.
        let n = 1 + (next(&mut rng) % 5) as usize;
        let mut pairs: Vec<usize> = Vec::new();
        while pairs.len() < n {
            let p = (next(&mut rng) % PAIRS as u64) as usize;
            if !pairs.contains(&p) {
                pairs.push(p);
            }
        }
        let plan: Vec<Planned> = pairs
            .iter()
            .map(|&pair| {
                let op = [Op::Write, Op::Read, Op::Send][(next(&mut rng) % 3) as usize];
                let len = 1 + (next(&mut rng) % (PART as u64 - 1)) as usize;
                let at = (next(&mut rng) % (PART - len + 1) as u64) as usize;
                let a_to_b = next(&mut rng).is_multiple_of(2);
                Planned {
                    op,
                    pair,
                    a_to_b,
                    at: pair * PART + at,
                    len,
                }
            })
            .collect();
        let (mut sends, mut recvs) = (0, 0);
        for p in &plan {
            let (from, to) = if p.a_to_b { (&a, &b) } else { (&b, &a) };
            wr_id += 1;
            let (opcode, local) = match p.op {
                Op::Write => (WrOpcode::RdmaWrite, from.sge(p.at, p.len)),
                // A READ brings the peer's bytes into this side's.
                Op::Read => (WrOpcode::RdmaRead, from.sge(p.at, p.len)),
                Op::Send => {
                    let sges = vec![to.sge(p.at, p.len)].into();
                    let recv = RecvWr { wr_id, sges };
                    let to = if p.a_to_b { &mut b } else { &mut a };
                    to.e.post_recv(to.qpns[p.pair], recv).unwrap();
                    recvs += 1;
                    (
                        WrOpcode::Send,
                        if p.a_to_b {
                            a.sge(p.at, p.len)
                        } else {
                            b.sge(p.at, p.len)
                        },
                    )
                }
            };
            let (from, to) = if p.a_to_b { (&a, &b) } else { (&b, &a) };
            let mut w = SendWr::new(wr_id, opcode, SendData::Sges(vec![local].into()));
            (w.remote_addr, w.rkey) = (to.mr.iova + p.at as u64, to.mr.rkey);
            w.flags = SendFlags::SIGNALED;
            let qpn = from.qpns[p.pair];
            let from = if p.a_to_b { &mut a } else { &mut b };
            from.e.post_send(qpn, w).unwrap();
            sends += 1;
        }
        let mut done: Vec<WorkCompletion> = Vec::new();
        let end = Instant::now() + SECS;
        while done.len() < sends + recvs {
            assert!(Instant::now() < end, "batch {plan:?}: {done:?} in 10 s");
            a.streams.poll(&mut a.e);
            b.streams.poll(&mut b.e);
            done.extend(a.e.poll_cq(a.cq, 64).unwrap());
            done.extend(b.e.poll_cq(b.cq, 64).unwrap());
        }
        assert!(
            done.iter().all(|c| c.status == WcStatus::Success),
            "{done:?}"
        );
        let mut ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(
            ids.len() + recvs,
            before,
            "a SEND and its receive share an id; nothing else"
        );
        // A READ's and a SEND's bytes are placed when they complete; a WRITE's completion
        // is local (its FPDUs handed to the driver), so its bytes may still be on the way.
        let intact = |a: &End, b: &End, p: &Planned| {
            let (from, to) = if p.a_to_b { (a, b) } else { (b, a) };
            let (src, dst) = match p.op {
                Op::Read => (to, from),
                Op::Write | Op::Send => (from, to),
            };
            src.bytes(p.at, p.len) == dst.bytes(p.at, p.len)
        };
        for p in &plan {
            if !matches!(p.op, Op::Write) {
                assert!(intact(&a, &b, p), "{p:?}: the bytes differ");
            }
        }
        let end = Instant::now() + SECS;
        while !plan.iter().all(|p| intact(&a, &b, p)) {
            assert!(
                Instant::now() < end,
                "{plan:?}: a WRITE's bytes never came whole"
            );
            a.streams.poll(&mut a.e);
            b.streams.poll(&mut b.e);
        }
    }
    // Nothing more completes.
    for _ in 0..50 {
        a.streams.poll(&mut a.e);
        b.streams.poll(&mut b.e);
    }
    assert!(a.e.poll_cq(a.cq, 64).unwrap().is_empty());
    assert!(b.e.poll_cq(b.cq, 64).unwrap().is_empty());
}
