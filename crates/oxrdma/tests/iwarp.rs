//! iWARP through the Rust API: two `Context::open_iwarp` devices, their RC QPs connected
//! by `iwarp::connect` and `iwarp::Listener` over TCP on loopback, moving registered
//! memory with WRITE, READ and SEND while the application waits (spins, then sleeps on
//! the CQ's channel: the engine thread must wake for a stream's bytes); private data
//! both ways; a refusal with the listener's private data; what iWARP cannot carry refused
//! when posted; a RoCE QP refused by `iwarp::connect` and `Listener::accept`.

use oxrdma::{iwarp, Access, Context, QpCap, QpType, QueuePair, RecvWr, SendWr};
use std::time::Duration;

const SECS: Duration = Duration::from_secs(10);

fn ctx(last: u8) -> Context {
    Context::open_iwarp(format!("127.0.0.{last}").parse().unwrap()).unwrap()
}

struct Side {
    ctx: Context,
    cq: oxrdma::CompletionQueue,
    mr: oxrdma::MemoryRegion,
    qp: QueuePair,
}

fn side(last: u8) -> Side {
    side_with(last, QpCap::default())
}

fn side_with(last: u8, cap: QpCap) -> Side {
    let ctx = ctx(last);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.register(4 << 20, Access::ALL).unwrap();
    let pattern: Vec<u8> = (0..4 << 20)
        .map(|i: usize| (i * 7 + usize::from(last)) as u8)
        .collect();
    mr.write(0, &pattern).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, cap).unwrap();
    Side { ctx, cq, mr, qp }
}

fn bytes(mr: &oxrdma::MemoryRegion, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mr.read(off, &mut v).unwrap();
    v
}

/// `a` connects to `b` through a listener; each learns the other's private data.
fn pair(a_last: u8, b_last: u8) -> (Side, Side) {
    connect(side(a_last), side(b_last))
}

fn connect(a: Side, b: Side) -> (Side, Side) {
    let l = iwarp::Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let b = std::thread::spawn(move || {
        let got = l.accept(&b.qp, b"from b").unwrap();
        assert_eq!(got, b"from a");
        b
    });
    let got = iwarp::connect(&a.qp, addr, b"from a").unwrap();
    assert_eq!(got, b"from b");
    (a, b.join().unwrap())
}

#[test]
fn write_read_and_send_between_two_iwarp_devices() {
    let (a, b) = pair(141, 142);
    assert_eq!(a.ctx.transport(), oxrdma::DeviceTransport::Iwarp);
    assert_eq!(
        (
            a.ctx.transport().node_type(),
            a.ctx.transport().transport_type()
        ),
        (4, 1)
    );
    assert_eq!(a.qp.state().unwrap(), oxrdma::QpState::Rts);
    let m = 1 << 20;
    b.qp.post_recv(RecvWr {
        wr_id: 9,
        sges: vec![b.mr.sge(3 << 20, 4096).unwrap()].into(),
    })
    .unwrap();
    let remote = b.mr.remote();
    let w = SendWr::write(
        1,
        [a.mr.sge(0, m).unwrap()],
        remote.slice(0..m as u64).unwrap(),
    );
    a.qp.post_send(w.unwrap()).unwrap();
    let r = SendWr::read(
        2,
        [a.mr.sge(2 << 20, m).unwrap()],
        remote.slice(m as u64..2 * m as u64).unwrap(),
    );
    a.qp.post_send(r.unwrap()).unwrap();
    a.qp.post_send(SendWr::send(3, [a.mr.sge(100, 4000).unwrap()]))
        .unwrap();
    let sent = a.cq.wait_for(3, SECS).unwrap();
    let ids: Vec<_> = sent.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(ids, [1, 2, 3].map(|i| (i, oxrdma::WcStatus::Success)));
    let got = b.cq.wait_one(SECS).unwrap();
    assert_eq!((got.wr_id, got.byte_len), (9, 4000));
    assert_eq!(bytes(&b.mr, 0, m), bytes(&a.mr, 0, m), "WRITE");
    assert_eq!(bytes(&a.mr, 2 << 20, m), bytes(&b.mr, m, m), "READ");
    assert_eq!(bytes(&b.mr, 3 << 20, 4000), bytes(&a.mr, 100, 4000), "SEND");
    // Many small round trips, each side waiting for the other's SEND.
    for i in 0..200u64 {
        b.qp.post_recv(RecvWr {
            wr_id: i,
            sges: vec![b.mr.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
        a.qp.post_recv(RecvWr {
            wr_id: i,
            sges: vec![a.mr.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
        a.qp.post_send(SendWr::send(i, [a.mr.sge(64, 8).unwrap()]))
            .unwrap();
        let (sa, rb) = (a.cq.wait_one(SECS).unwrap(), b.cq.wait_one(SECS).unwrap());
        assert!(sa.wr_id == i && rb.wr_id == i, "round {i}");
        b.qp.post_send(SendWr::send(i, [b.mr.sge(64, 8).unwrap()]))
            .unwrap();
        let got: Vec<_> = b.cq.wait_for(1, SECS).unwrap();
        let back = a.cq.wait_one(SECS).unwrap();
        assert!(got[0].wr_id == i && back.wr_id == i, "round {i}");
    }
}

#[test]
fn refusals_and_what_iwarp_cannot_carry() {
    let a = side(143);
    let l = iwarp::Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    // A listener whose QP is RoCE's refuses before reading anything: the peer sees the
    // connection close.
    let roce = Context::open("127.0.0.144".parse().unwrap()).unwrap();
    assert_eq!(roce.transport(), oxrdma::DeviceTransport::Ib);
    let pd = roce.alloc_pd().unwrap();
    let cq = roce.create_cq(4).unwrap();
    let rqp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    assert!(matches!(l.accept(&rqp, b""), Err(oxrdma::Error::Verbs(_))));
    assert!(matches!(
        iwarp::connect(&rqp, addr, b""),
        Err(oxrdma::Error::Verbs(_))
    ));
    // A refusal, with the listener's words.
    let t = std::thread::spawn(move || {
        let incoming = l.incoming().unwrap();
        assert_eq!(incoming.private_data(), b"may I?");
        incoming.reject(b"no").unwrap();
        l
    });
    match iwarp::connect(&a.qp, addr, b"may I?") {
        Err(oxrdma::Error::Rejected { private_data, .. }) => assert_eq!(private_data, b"no"),
        other => panic!("{other:?}"),
    }
    // Nobody listening: a clear I/O error.
    drop(t.join().unwrap());
    assert!(matches!(
        iwarp::connect(&a.qp, addr, b""),
        Err(oxrdma::Error::Io(_))
    ));
    // Atomics and immediate data are refused at post on a connected iWARP QP.
    let (a, b) = pair(145, 146);
    let remote = b.mr.remote().slice(0..8).unwrap();
    let cas = SendWr::atomic_cas(1, a.mr.sge(0, 8).unwrap(), remote, 0, 1).unwrap();
    assert!(a.qp.post_send(cas).is_err());
    let w = SendWr::write(2, [a.mr.sge(0, 8).unwrap()], remote)
        .unwrap()
        .with_imm(7)
        .unwrap();
    assert!(a.qp.post_send(w).is_err());
}

#[test]
fn a_completion_seen_leaves_its_slot_free_for_the_next_post() {
    // As perftest keeps its send queue full: a post after each completion seen. The
    // engine thread freed a WR's slot only after pushing its completion, so a program
    // that saw the completion in between found the queue full (ib_send_bw -R on siw0
    // failed "Couldn't post send" about once in 10 runs).
    let depth = 4;
    let cap = QpCap {
        max_send_wr: depth,
        ..QpCap::default()
    };
    let (a, b) = connect(side_with(145, cap), side(146));
    let remote = b.mr.remote();
    let write = |i: u64| {
        let off = (i % 512) * 8;
        let to = remote.slice(off..off + 8).unwrap();
        SendWr::write(i, [a.mr.sge(off as usize, 8).unwrap()], to).unwrap()
    };
    let total = 100_000u64;
    let mut posted = 0;
    while posted < u64::from(depth) {
        a.qp.post_send(write(posted)).unwrap();
        posted += 1;
    }
    let mut done = 0;
    let mut wcs = Vec::new();
    let give_up = std::time::Instant::now() + Duration::from_secs(120);
    while done < total {
        assert!(
            std::time::Instant::now() < give_up,
            "{done} of {total} completed"
        );
        wcs.clear();
        a.cq.poll(&mut wcs, 16).unwrap();
        for wc in &wcs {
            assert_eq!((wc.wr_id, wc.status), (done, oxrdma::WcStatus::Success));
            done += 1;
            if posted < total {
                let r = a.qp.post_send(write(posted));
                assert!(r.is_ok(), "post {posted} after {done} completions: {r:?}");
                posted += 1;
            }
        }
    }
}
