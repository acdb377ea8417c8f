//! ReDMArk's A4 on real sockets: a server that accepts every connection request, making a
//! QP for each (as a program on the RDMA CM does), is asked for connections without end by
//! one peer. With `OXRDMA_LIMITS=cm_conns_per_peer=16,max_qp=128` that peer gets 16 and "no
//! resources" for the rest, counted; another peer still connects; the server spent a QP
//! per connection it made and no more. With `max_qp=128` a device of the process makes
//! 128 QPs and no more. Alone in its test binary: it sets the limits in the
//! environment before any device opens.

mod common;
use common::next_event as next;

use oxrdma::cm::{CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use oxrdma::{Context, Counter, QpCap, QpType};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const SERVER: &str = "127.0.0.164";
const ATTACKER: &str = "127.0.0.165";
const OTHER: &str = "127.0.0.166";
const LIMIT: usize = 16;
const ASKED: usize = 100;
/// QPs a device of this process may hold (`OXRDMA_LIMITS=max_qp=`).
const MAX_QP: usize = 128;
/// IBA's REJ reason "no resources".
const NO_RESOURCES: i32 = 3;

fn ctx(ip: &str) -> Context {
    Context::open(ip.parse().unwrap()).unwrap()
}

/// A client id on `ch` with its address and route to `dst` resolved and `qp` attached,
/// ready to connect.
fn resolved(ch: &EventChannel, c: &Context, dst: SocketAddr, qp: &oxrdma::QueuePair) -> CmId {
    let id = CmId::new(ch, c, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, dst).unwrap();
    let e = next(ch);
    assert_eq!(e.event, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    let e = next(ch);
    assert_eq!(e.event, CmEventType::RouteResolved);
    id.attach_qp(qp).unwrap();
    id
}

#[test]
fn one_peer_cannot_take_every_connection_a_server_would_accept() {
    std::env::set_var(
        "OXRDMA_LIMITS",
        format!("cm_conns_per_peer={LIMIT},max_qp={MAX_QP}"),
    );
    let server = ctx(SERVER);
    let dst: SocketAddr = format!("{SERVER}:47161").parse().unwrap();
    let chs = EventChannel::new().unwrap();
    let listener = CmId::new(&chs, &server, PortSpace::Tcp).unwrap();
    listener.bind_addr(dst).unwrap();
    listener.listen(1024).unwrap();
    let (pds, cqs) = (server.alloc_pd().unwrap(), server.create_cq(64).unwrap());
    let mut accepted = Vec::new();

    let (attacker, other) = (ctx(ATTACKER), ctx(OTHER));
    let (cha, cho) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let (pda, cqa) = (
        attacker.alloc_pd().unwrap(),
        attacker.create_cq(64).unwrap(),
    );
    let mut attempts = Vec::new();
    for _ in 0..ASKED {
        let qp = pda
            .create_qp(&cqa, &cqa, QpType::Rc, QpCap::default())
            .unwrap();
        attempts.push((resolved(&cha, &attacker, dst, &qp), qp));
    }
    for (id, _) in &attempts {
        id.connect(&ConnParam::default()).unwrap();
    }
    let (pdo, cqo) = (other.alloc_pd().unwrap(), other.create_cq(8).unwrap());
    let qpo = pdo
        .create_qp(&cqo, &cqo, QpType::Rc, QpCap::default())
        .unwrap();
    let ido = resolved(&cho, &other, dst, &qpo);
    ido.connect(&ConnParam::default()).unwrap();

    // The server accepts all it is asked; the clients count their outcomes.
    let (mut established, mut refused, mut other_in) = (0, 0, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while established + refused < ASKED || !other_in {
        assert!(
            Instant::now() < deadline,
            "{established} established, {refused} refused, the other peer in: {other_in}"
        );
        while let Some(e) = chs.try_event() {
            match e.event {
                CmEventType::ConnectRequest => {
                    let conn = e.new_id.unwrap();
                    let qp = pds
                        .create_qp(&cqs, &cqs, QpType::Rc, QpCap::default())
                        .unwrap();
                    conn.attach_qp(&qp).unwrap();
                    conn.accept(&ConnParam::default()).unwrap();
                    accepted.push((conn, qp));
                }
                CmEventType::Established => {}
                other => panic!("the server got {other:?} ({})", e.status),
            }
        }
        while let Some(e) = cha.try_event() {
            match (e.event, e.status) {
                (CmEventType::Established, _) => established += 1,
                (CmEventType::Rejected, NO_RESOURCES) => refused += 1,
                (other, status) => panic!("the attacker got {other:?} ({status})"),
            }
        }
        if let Some(e) = cho.try_event() {
            assert_eq!(e.event, CmEventType::Established, "status {}", e.status);
            other_in = true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let limited = server.counters()[Counter::CmPeerLimited];
    println!(
        "{ASKED} requests from one peer: {established} connected, {refused} refused with \
         \"no resources\" (cm_peer_limited {limited}); the other peer connected; the server \
         made {} QPs",
        accepted.len()
    );
    assert_eq!((established, refused), (LIMIT, ASKED - LIMIT));
    assert_eq!(limited, (ASKED - LIMIT) as u64);
    assert_eq!(
        accepted.len(),
        LIMIT + 1,
        "a QP per connection made, no more"
    );
    // The process's own limit: a program that makes QPs without end gets `max_qp` of
    // them on a device (the other peer's device has one already), then a clear error.
    let mut more = Vec::new();
    let err = loop {
        match pdo.create_qp(&cqo, &cqo, QpType::Rc, QpCap::default()) {
            Ok(q) => more.push(q),
            Err(e) => break e,
        }
        assert!(more.len() < 10 * MAX_QP, "no limit");
    };
    assert_eq!(more.len() + 1, MAX_QP, "{err}");
    assert!(err.to_string().contains("resource exhausted"), "{err}");
}
