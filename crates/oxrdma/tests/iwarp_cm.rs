//! The RDMA CM's event API on iWARP devices (issue 60 item 3): `CmId`s of two
//! `Context::open_iwarp` devices connect over TCP and MPA with nothing but the device
//! chosen, as librdmacm's programs do: listen, resolve, connect, `ConnectRequest` with the
//! peer's private data, accept, `Established` on both sides (no `ConnectResponse`), data
//! both ways, `Disconnected` on both sides; a rejection (-ECONNREFUSED with the
//! listener's private data), a port nobody listens on, and what iWARP refuses (UD ids,
//! `rdma_establish`, a connect without a QP).

use oxrdma::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use oxrdma::{Access, Context, QpCap, QpType, QueuePair, RecvWr, SendWr};
use std::net::SocketAddr;
use std::time::Duration;

const SECS: Duration = Duration::from_secs(10);
const ECONNREFUSED: i32 = -111;

fn ctx(last: u8) -> Context {
    Context::open_iwarp(format!("127.0.0.{last}").parse().unwrap()).unwrap()
}

fn expect(ch: &EventChannel, what: CmEventType) -> CmEvent {
    let e = ch
        .get_event_timeout(SECS)
        .unwrap()
        .unwrap_or_else(|| panic!("no event within {SECS:?}; expected {what:?}"));
    assert_eq!(e.event, what, "status {}", e.status);
    e
}

fn qp(ctx: &Context) -> (QueuePair, oxrdma::CompletionQueue, oxrdma::MemoryRegion) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.register(1 << 16, Access::ALL).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    (qp, cq, mr)
}

/// A listener on `server`'s device; its address.
fn listen(ch: &EventChannel, server: &Context) -> (CmId, SocketAddr) {
    let l = CmId::new(ch, server, PortSpace::Tcp).unwrap();
    l.bind_addr(SocketAddr::new(server.gid().ip(), 0)).unwrap();
    l.listen(8).unwrap();
    let addr = l.local_addr().unwrap();
    assert_ne!(addr.port(), 0, "the bound port is known at once");
    (l, addr)
}

/// A client id with its address and route resolved to `dst`.
fn resolved(ch: &EventChannel, client: &Context, dst: SocketAddr) -> CmId {
    let id = CmId::new(ch, client, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, dst).unwrap();
    expect(ch, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    expect(ch, CmEventType::RouteResolved);
    id
}

fn param(data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: data.to_vec(),
        ..ConnParam::default()
    }
}

#[test]
fn cm_ids_connect_iwarp_qps_move_data_and_disconnect_on_both_sides() {
    let (server, client) = (ctx(151), ctx(152));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let (_l, addr) = listen(&chs, &server);
    let id = resolved(&chc, &client, addr);
    let (cqp, ccq, cmr) = qp(&client);
    id.attach_qp(&cqp).unwrap();
    assert_eq!(cqp.state().unwrap(), oxrdma::QpState::Init);
    id.connect(&param(b"hello from the client")).unwrap();

    let req = expect(&chs, CmEventType::ConnectRequest);
    assert_eq!(req.conn.private_data, b"hello from the client");
    let sid = req.new_id.expect("a request comes with its id");
    assert_eq!(sid.peer_addr().map(|a| a.ip()), Some(client.gid().ip()));
    let (sqp, scq, smr) = qp(&server);
    sid.attach_qp(&sqp).unwrap();
    sqp.post_recv(RecvWr {
        wr_id: 7,
        sges: vec![smr.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    sid.accept(&param(b"welcome")).unwrap();
    expect(&chs, CmEventType::Established);
    let est = expect(&chc, CmEventType::Established);
    assert_eq!(est.conn.private_data, b"welcome");
    assert_eq!(cqp.state().unwrap(), oxrdma::QpState::Rts);
    assert_eq!(sqp.state().unwrap(), oxrdma::QpState::Rts);

    // A WRITE then a SEND from the client, checked in the server's memory (a WRITE's
    // completion says only that it left, so the SEND behind it on the stream says
    // when it is placed).
    cmr.write(0, b"ping over iWARP").unwrap();
    let w = SendWr::write(
        2,
        [cmr.sge(0, 15).unwrap()],
        smr.remote().slice(1000..1015).unwrap(),
    )
    .unwrap();
    cqp.post_send(w).unwrap();
    cqp.post_send(SendWr::send(1, [cmr.sge(0, 15).unwrap()]))
        .unwrap();
    let done = ccq.wait_for(2, SECS).unwrap();
    assert!(done.iter().all(|c| c.status == oxrdma::WcStatus::Success));
    let got = scq.wait_one(SECS).unwrap();
    assert_eq!((got.wr_id, got.byte_len), (7, 15));
    let mut seen = [0u8; 15];
    smr.read(0, &mut seen).unwrap();
    assert_eq!(&seen, b"ping over iWARP");
    smr.read(1000, &mut seen).unwrap();
    assert_eq!(&seen, b"ping over iWARP");

    // The client disconnects: both sides hear of it, each once, and a receive still
    // posted on either side is flushed at once (rping's CQ threads wait for that).
    for (q, mr) in [(&cqp, &cmr), (&sqp, &smr)] {
        q.post_recv(RecvWr {
            wr_id: 99,
            sges: vec![mr.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
    }
    id.disconnect().unwrap();
    for cq in [&ccq, &scq] {
        let wc = cq.wait_one(SECS).unwrap();
        assert_eq!((wc.wr_id, wc.status), (99, oxrdma::WcStatus::WrFlushErr));
    }
    expect(&chc, CmEventType::Disconnected);
    expect(&chs, CmEventType::Disconnected);
    assert_eq!(cqp.state().unwrap(), oxrdma::QpState::Err);
    assert_eq!(sqp.state().unwrap(), oxrdma::QpState::Err);
    for ch in [&chs, &chc] {
        assert!(
            ch.get_event_timeout(Duration::from_millis(200))
                .unwrap()
                .is_none(),
            "nothing after Disconnected"
        );
    }
}

#[test]
fn a_rejection_a_port_nobody_listens_on_and_what_iwarp_refuses() {
    let (server, client) = (ctx(153), ctx(154));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let (l, addr) = listen(&chs, &server);

    // Rejected by the listener's program, with its words.
    let id = resolved(&chc, &client, addr);
    let (cqp, _ccq, _cmr) = qp(&client);
    id.attach_qp(&cqp).unwrap();
    id.connect(&param(b"may I?")).unwrap();
    let req = expect(&chs, CmEventType::ConnectRequest);
    assert_eq!(req.conn.private_data, b"may I?");
    req.new_id.unwrap().reject(b"no").unwrap();
    let rej = expect(&chc, CmEventType::Rejected);
    assert_eq!(
        (rej.status, rej.conn.private_data),
        (ECONNREFUSED, b"no".to_vec())
    );
    assert_eq!(cqp.state().unwrap(), oxrdma::QpState::Err);

    // A request whose id is dropped unanswered is refused too.
    let id2 = resolved(&chc, &client, addr);
    let (qp2, _cq2, _mr2) = qp(&client);
    id2.attach_qp(&qp2).unwrap();
    id2.connect(&param(b"")).unwrap();
    drop(expect(&chs, CmEventType::ConnectRequest));
    assert_eq!(expect(&chc, CmEventType::Rejected).status, ECONNREFUSED);

    // Nobody listens once the listener is gone.
    drop(l);
    let id3 = resolved(&chc, &client, addr);
    let (qp3, _cq3, _mr3) = qp(&client);
    id3.attach_qp(&qp3).unwrap();
    id3.connect(&param(b"")).unwrap();
    assert_eq!(expect(&chc, CmEventType::Rejected).status, ECONNREFUSED);

    // A connect without a QP, rdma_establish and UD are refused at the call.
    let bare = resolved(&chc, &client, addr);
    assert!(bare.connect(&param(b"")).is_err());
    assert!(bare.establish().is_err());
    assert!(CmId::new(&chc, &client, PortSpace::Udp).is_err());
    // A bound port is the TCP port: a second bind to it is refused.
    let (_l2, taken) = listen(&chs, &server);
    let again = CmId::new(&chs, &server, PortSpace::Tcp).unwrap();
    assert!(again.bind_addr(taken).is_err());
}

#[test]
fn rsockets_run_over_iwarp_with_their_messages_as_sends() {
    use oxrdma::rsocket::{RListener, RStream};
    use std::io::{Read, Write};
    let (server, client) = (ctx(155), ctx(156));
    let l = RListener::bind(&server, SocketAddr::new(server.gid().ip(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let mut s = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        // Hold the stream until the client has read it all.
        let mut end = [0u8; 1];
        assert_eq!(s.read(&mut end).unwrap(), 0);
    });
    let mut c = RStream::connect(&client, addr).unwrap();
    // 1 MiB each way: many credit updates (each a WRITE and a SEND of its message), and
    // the receive buffer's halves reused.
    let out: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 31 % 251) as u8).collect();
    for chunk in out.chunks(10_000) {
        c.write_all(chunk).unwrap();
    }
    let mut back = vec![0u8; out.len()];
    c.read_exact(&mut back).unwrap();
    assert!(back == out, "the echo differs");
    drop(c);
    echo.join().unwrap();
}

/// Whether `ch`'s descriptor turns readable (an event waits) within `ms` milliseconds.
fn readable(ch: &EventChannel, ms: i64) -> bool {
    let mut fds = [rustix::event::PollFd::new(ch, rustix::event::PollFlags::IN)];
    let t = rustix::event::Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    };
    rustix::event::poll(&mut fds, Some(&t)).unwrap() == 1
}

/// A request still waiting in the channel when its listener is destroyed is refused at
/// once, as librdmacm's listener destruction refuses its pending requests (it waited for
/// MPA's 10 s before).
#[test]
fn a_request_queued_for_a_listener_destroyed_is_refused() {
    let (server, client) = (ctx(160), ctx(161));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let (l, addr) = listen(&chs, &server);
    let id = resolved(&chc, &client, addr);
    let (q, _cq, _mr) = qp(&client);
    id.attach_qp(&q).unwrap();
    id.connect(&param(b"")).unwrap();
    // The request reaches the listener's channel (its descriptor is readable); nobody
    // takes it.
    assert!(readable(&chs, 10_000), "no request came");
    drop(l);
    let rej = chc
        .get_event_timeout(Duration::from_secs(2))
        .unwrap()
        .expect("the client heard nothing within 2 s");
    assert_eq!(
        (rej.event, rej.status),
        (CmEventType::Rejected, ECONNREFUSED)
    );
}

/// `rdma_listen`'s backlog holds: with two connections that never send MPA's request
/// taking its two places, a third peer's request waits (its connection in the kernel's
/// queue, no thread of ours on it) until one of them goes; then it is handed up.
#[test]
fn a_listeners_backlog_bounds_the_requests_it_reads() {
    let (server, client) = (ctx(162), ctx(163));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let l = CmId::new(&chs, &server, PortSpace::Tcp).unwrap();
    l.bind_addr(SocketAddr::new(server.gid().ip(), 0)).unwrap();
    l.listen(2).unwrap();
    let addr = l.local_addr().unwrap();
    let silent: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let id = resolved(&chc, &client, addr);
    let (q, _cq, _mr) = qp(&client);
    id.attach_qp(&q).unwrap();
    id.connect(&param(b"third")).unwrap();
    assert!(
        !readable(&chs, 500),
        "a third request was read with the backlog of 2 full"
    );
    drop(silent);
    let req = expect(&chs, CmEventType::ConnectRequest);
    assert_eq!(req.conn.private_data, b"third");
    req.new_id.unwrap().reject(b"").unwrap();
    assert_eq!(expect(&chc, CmEventType::Rejected).status, ECONNREFUSED);
}

/// An iWARP id lives by the RDMA CM's one machine, as a RoCE id does: the same calls out
/// of turn are refused on both (a connect before the route is resolved among them, which
/// the kernel's CM refuses on iWARP too).
#[test]
fn an_iwarp_id_refuses_the_calls_a_roce_id_refuses() {
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Bind,
        ResolveAddr,
        ResolveRoute,
        Connect,
        Accept,
        Reject,
        Disconnect,
    }
    use Step::*;
    let scripts: [&[Step]; 4] = [
        &[ResolveRoute, Accept, Reject, Disconnect, Connect],
        &[ResolveAddr, Connect, Accept, Disconnect, Bind, ResolveAddr],
        &[Bind, Bind, ResolveRoute, ResolveAddr, Reject, ResolveRoute],
        &[Bind, ResolveAddr, ResolveRoute, Accept, Bind, ResolveRoute],
    ];
    let (roce, iwarp) = (
        Context::open("127.0.0.157".parse().unwrap()).unwrap(),
        ctx(158),
    );
    let dst: SocketAddr = "127.0.0.159:7999".parse().unwrap();
    for script in scripts {
        let outcomes: Vec<Vec<bool>> = [&roce, &iwarp]
            .iter()
            .map(|c| {
                let ch = EventChannel::new().unwrap();
                let id = CmId::new(&ch, c, PortSpace::Tcp).unwrap();
                let (q, _cq, _mr) = qp(c);
                id.attach_qp(&q).unwrap();
                script
                    .iter()
                    .map(|s| match s {
                        Bind => id.bind_addr(SocketAddr::new(c.gid().ip(), 0)),
                        ResolveAddr => id.resolve_addr(None, dst),
                        ResolveRoute => id.resolve_route(),
                        Connect => id.connect(&param(b"")),
                        Accept => id.accept(&param(b"")),
                        Reject => id.reject(b""),
                        Disconnect => id.disconnect(),
                    })
                    .map(|r| r.is_ok())
                    .collect()
            })
            .collect();
        assert_eq!(
            outcomes[0], outcomes[1],
            "{script:?}: RoCE's answers (first) against iWARP's"
        );
    }
}

/// Connections made one after the other reach the listener's program in that order, as
/// the kernel's iWARP CM delivers them: perftest -R -q N numbers its QPs by the order of
/// its `rdma_connect`s on one side and of its `CONNECT_REQUEST`s on the other, and its
/// flow control (credits WRITten per QP over iWARP, which has no RNR) hung when they
/// disagreed. Each request's thread raced the others (and each connect's thread too).
#[test]
fn requests_come_in_the_order_their_connections_were_made() {
    let (server, client) = (ctx(167), ctx(168));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let (_l, addr) = listen(&chs, &server);
    const N: u8 = 8;
    for round in 0..5 {
        let ids: Vec<_> = (0..N)
            .map(|i| {
                let id = resolved(&chc, &client, addr);
                let (q, cq, mr) = qp(&client);
                id.attach_qp(&q).unwrap();
                (id, i, (q, cq, mr))
            })
            .collect();
        for (id, i, _) in &ids {
            id.connect(&param(&[*i])).unwrap();
        }
        let order: Vec<u8> = (0..N)
            .map(|_| {
                let req = expect(&chs, CmEventType::ConnectRequest);
                req.new_id.unwrap().reject(b"").unwrap();
                req.conn.private_data[0]
            })
            .collect();
        assert_eq!(order, (0..N).collect::<Vec<_>>(), "round {round}");
        for _ in 0..N {
            expect(&chc, CmEventType::Rejected);
        }
    }
}
