//! The RDMA CM in Rust's shape (`cm::connect`, `cm::Listener`), over real UDP between two
//! devices of this host (127.0.0.221-224): private data at its real length both ways, data
//! over the connection, a rejection with its reason and data, bad arguments refused at
//! once; and the channels' non-blocking modes.

mod common;
use common::wait;

use oxrdma::cm::{self, Listener};
use oxrdma::{Access, Context, Error, QpCap, QpType, SendWr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

fn ctx(last: u8) -> Context {
    Context::open(format!("127.0.0.{last}").parse().unwrap()).unwrap()
}

#[test]
fn connect_and_accept_carry_private_data_at_its_length_and_move_data() {
    let (cs, cc) = (ctx(221), ctx(222));
    let (ps, pc) = (cs.alloc_pd().unwrap(), cc.alloc_pd().unwrap());
    let (cqs, cqc) = (cs.create_cq(16).unwrap(), cc.create_cq(16).unwrap());
    let qs = ps
        .create_qp(&cqs, &cqs, QpType::Rc, QpCap::default())
        .unwrap();
    let qc = pc
        .create_qp(&cqc, &cqc, QpType::Rc, QpCap::default())
        .unwrap();
    let ms = ps.register(4096, Access::ALL).unwrap();
    let mc = pc.register(4096, Access::ALL).unwrap();
    let listener = Listener::bind(&cs, "0.0.0.0:47221".parse().unwrap()).unwrap();
    let remote = ms.remote();
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let req = listener.next_request(Duration::from_secs(10)).unwrap();
            assert_eq!(
                req.private_data(),
                b"hi there",
                "the client's 8 bytes, not 56"
            );
            req.accept(&qs, b"welcome back").unwrap()
        });
        let conn = cm::connect(&cc, "127.0.0.1:47221".parse().unwrap(), &qc, b"hi there").unwrap();
        assert_eq!(conn.private_data(), b"welcome back", "12 bytes, not 196");
        let sconn = server.join().unwrap();
        assert_eq!(sconn.private_data(), b"hi there");
        assert_eq!(
            sconn.peer_addr().unwrap().port(),
            conn.local_addr().unwrap().port()
        );
        mc.write(0, b"through the CM").unwrap();
        let w = SendWr::write(1, [mc.sge(0, 14).unwrap()], remote).unwrap();
        qc.post_send(w).unwrap();
        wait(&cqc, 1)[0].result().unwrap();
        let mut got = [0u8; 14];
        ms.read(0, &mut got).unwrap();
        assert_eq!(&got, b"through the CM");
    });
}

#[test]
fn a_rejection_is_an_error_with_the_reason_and_the_peers_data() {
    let (cs, cc) = (ctx(223), ctx(224));
    let pc = cc.alloc_pd().unwrap();
    let cqc = cc.create_cq(16).unwrap();
    let qc = pc
        .create_qp(&cqc, &cqc, QpType::Rc, QpCap::default())
        .unwrap();
    let listener = Listener::bind(&cs, "0.0.0.0:47223".parse().unwrap()).unwrap();
    // Too much private data: refused at once, nothing sent.
    let e = cm::connect(&cc, "127.0.0.1:47223".parse().unwrap(), &qc, &[0; 56]).unwrap_err();
    assert!(e.to_string().contains("55 bytes"), "{e}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let req = listener.next_request(Duration::from_secs(10)).unwrap();
            assert_eq!(req.private_data(), b"let me in");
            req.reject(b"not today").unwrap();
        });
        let e =
            cm::connect(&cc, "127.0.0.1:47223".parse().unwrap(), &qc, b"let me in").unwrap_err();
        match &e {
            Error::Rejected {
                status,
                private_data,
            } => assert_eq!((*status, &private_data[..]), (28, &b"not today"[..])),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            std::io::Error::from(e).kind(),
            std::io::ErrorKind::ConnectionRefused
        );
    });
    // No request waiting: the listener says so when the time is up.
    let start = Instant::now();
    let e = listener
        .next_request(Duration::from_millis(200))
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::TimedOut);
}

#[test]
fn channels_can_be_non_blocking_and_name_their_descriptors() {
    let c = ctx(225);
    let ch = c.create_comp_channel().unwrap();
    assert!(ch.as_raw_fd() >= 0);
    ch.set_nonblocking(true).unwrap();
    let start = Instant::now();
    assert_eq!(ch.get_event().unwrap(), None);
    assert_eq!(ch.try_get_event().unwrap(), None);
    assert!(start.elapsed() < Duration::from_secs(1));
    let ev = cm::EventChannel::new().unwrap();
    assert!(ev.as_raw_fd() >= 0);
    ev.set_nonblocking(true).unwrap();
    assert!(ev.get_event().unwrap().is_none());
    ev.set_nonblocking(false).unwrap();
    assert!(ev
        .get_event_timeout(Duration::from_millis(50))
        .unwrap()
        .is_none());
}
