//! Secure QPs through the RDMA CM (`SecureMode`): keys agreed by X25519 in the REQ's and
//! REP's private data, over real UDP between two devices of this host (127.0.0.191-198).
//! An offer answered makes both QPs secure (and their packets opaque in a capture); an
//! offer not answered leaves them plain, or fails the connection where it is required; the
//! application's private data is its own either way.

mod common;
use common::{next_event, wait};

use oxrdma::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, PortSpace, SecureMode};
use oxrdma::{
    Access, Context, Counter, MemoryRegion, ProtectionDomain, QpCap, QpState, QpType, QueuePair,
    RecvWr, SendData, SendWr, WcStatus, WrOpcode,
};
use std::net::SocketAddr;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn expect(ch: &EventChannel, what: CmEventType) -> CmEvent {
    let e = next_event(ch);
    assert_eq!(e.event, what, "status {}", e.status);
    e
}

/// One side: its device, channel, PD, CQ, an RC QP and a region.
struct End {
    ctx: Context,
    ch: EventChannel,
    pd: ProtectionDomain,
    cq: oxrdma::CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn end(last: u8) -> End {
    let ctx = Context::open(format!("127.0.0.{last}").parse().unwrap()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    let mr = pd.register(4096, Access::ALL).unwrap();
    End {
        ch: EventChannel::new().unwrap(),
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

/// A listener of `server`'s on `port` in `mode`.
fn listen(server: &End, port: u16, mode: Option<SecureMode>) -> CmId {
    let l = CmId::new(&server.ch, &server.ctx, PortSpace::Tcp).unwrap();
    if let Some(m) = mode {
        l.set_secure(m).unwrap();
    }
    l.bind_addr(addr(&format!("0.0.0.0:{port}"))).unwrap();
    l.listen(4).unwrap();
    l
}

/// `client`'s id, resolved to the listener on `port`, its QP attached, in `mode`.
fn resolved(client: &End, port: u16, mode: Option<SecureMode>) -> CmId {
    let id = CmId::new(&client.ch, &client.ctx, PortSpace::Tcp).unwrap();
    if let Some(m) = mode {
        id.set_secure(m).unwrap();
    }
    id.resolve_addr(None, addr(&format!("127.0.0.1:{port}")))
        .unwrap();
    expect(&client.ch, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    expect(&client.ch, CmEventType::RouteResolved);
    id.attach_qp(&client.qp).unwrap();
    id
}

/// Writes what `e`'s device sends and receives to a pcap file, from now on.
fn capture(e: &End, name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!(
        "oxrdma-cm-secure-{name}-{}.pcap",
        std::process::id()
    ));
    e.ctx.capture_to(&p).unwrap();
    p
}

/// A SEND each way and a WRITE and a READ from the client, every byte checked.
fn traffic(c: &End, s: &End) {
    s.qp.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![s.mr.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    c.mr.write(0, b"a secret SEND").unwrap();
    c.qp.post_send(SendWr::new(
        2,
        WrOpcode::Send,
        SendData::Sges(vec![c.mr.sge(0, 13).unwrap()].into()),
    ))
    .unwrap();
    assert_eq!(wait(&c.cq, 1)[0].status, WcStatus::Success);
    let got = wait(&s.cq, 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 13));
    let mut buf = [0u8; 13];
    s.mr.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"a secret SEND");

    c.mr.write(100, b"a secret WRITE").unwrap();
    let mut w = SendWr::new(
        3,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![c.mr.sge(100, 14).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (s.mr.addr() + 100, s.mr.rkey());
    c.qp.post_send(w).unwrap();
    assert_eq!(wait(&c.cq, 1)[0].status, WcStatus::Success);
    let mut buf = [0u8; 14];
    s.mr.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"a secret WRITE");

    s.mr.write(200, b"a secret READ").unwrap();
    let mut r = SendWr::new(
        4,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![c.mr.sge(200, 13).unwrap()].into()),
    );
    (r.remote_addr, r.rkey) = (s.mr.addr() + 200, s.mr.rkey());
    c.qp.post_send(r).unwrap();
    assert_eq!(wait(&c.cq, 1)[0].status, WcStatus::Success);
    let mut buf = [0u8; 13];
    c.mr.read(200, &mut buf).unwrap();
    assert_eq!(&buf, b"a secret READ");
}

/// Connects `c` to the listener on `port` (client in `cm`, server in `sm`), both sides'
/// private data checked: the client's 5 bytes and the server's 7 arrive, the rest zero
/// (no offer shown to either application). Returns the ids.
fn connect(
    c: &End,
    s: &End,
    port: u16,
    cm: Option<SecureMode>,
    sm: Option<SecureMode>,
) -> (CmId, CmId, CmId) {
    let l = listen(s, port, sm);
    let id = resolved(c, port, cm);
    id.connect(&ConnParam {
        private_data: b"hello".to_vec(),
        ..ConnParam::default()
    })
    .unwrap();
    let req = expect(&s.ch, CmEventType::ConnectRequest);
    assert_eq!(req.conn.private_data.len(), 56);
    assert_eq!(&req.conn.private_data[..5], b"hello");
    assert!(
        req.conn.private_data[5..].iter().all(|&b| b == 0),
        "the application sees no offer: {:?}",
        req.conn.private_data
    );
    let conn = req.new_id.unwrap();
    conn.attach_qp(&s.qp).unwrap();
    conn.accept(&ConnParam {
        private_data: b"welcome".to_vec(),
        ..ConnParam::default()
    })
    .unwrap();
    let est = expect(&c.ch, CmEventType::Established);
    assert_eq!(&est.conn.private_data[..7], b"welcome");
    assert!(
        est.conn.private_data[7..].iter().all(|&b| b == 0),
        "the application sees no answer"
    );
    expect(&s.ch, CmEventType::Established);
    (l, id, conn)
}

#[test]
fn an_answered_offer_makes_both_qps_secure_and_their_packets_opaque() {
    let (c, s) = (end(191), end(192));
    let pcap = capture(&c, "answered");
    // The server answers by default.
    let (_l, _id, _conn) = connect(&c, &s, 47191, Some(SecureMode::Offer), None);
    assert!(c.qp.is_secure().unwrap(), "the client's QP");
    assert!(s.qp.is_secure().unwrap(), "the server's QP");
    traffic(&c, &s);
    let bytes = std::fs::read(&pcap).unwrap();
    let _ = std::fs::remove_file(&pcap);
    assert!(bytes.len() > 500, "the capture holds the traffic");
    for secret in [&b"a secret"[..], &s.mr.rkey().to_be_bytes()] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "{secret:?} is in the capture"
        );
    }
    for e in [&c, &s] {
        assert_eq!(e.ctx.counters()[Counter::AuthFailed], 0);
    }
}

#[test]
fn a_peer_that_does_not_answer_leaves_the_qps_plain() {
    let (c, s) = (end(193), end(194));
    let pcap = capture(&c, "plain");
    let (_l, _id, _conn) = connect(
        &c,
        &s,
        47193,
        Some(SecureMode::Offer),
        Some(SecureMode::Off),
    );
    assert!(!c.qp.is_secure().unwrap() && !s.qp.is_secure().unwrap());
    traffic(&c, &s);
    let bytes = std::fs::read(&pcap).unwrap();
    let _ = std::fs::remove_file(&pcap);
    assert!(
        bytes.windows(8).any(|w| w == b"a secret"),
        "plain RoCEv2: the payload shows (the capture works)"
    );
}

#[test]
fn a_client_that_requires_keys_refuses_a_peer_that_does_not_answer() {
    let (c, s) = (end(195), end(196));
    let _l = listen(&s, 47195, Some(SecureMode::Off));
    let id = resolved(&c, 47195, Some(SecureMode::Require));
    // Too much private data for the offer: refused at once, nothing sent.
    let long = ConnParam {
        private_data: vec![1; 21],
        ..ConnParam::default()
    };
    let e = id.connect(&long).unwrap_err();
    assert!(e.to_string().contains("20 bytes"), "{e}");
    id.connect(&ConnParam::default()).unwrap();
    let conn = expect(&s.ch, CmEventType::ConnectRequest).new_id.unwrap();
    conn.attach_qp(&s.qp).unwrap();
    conn.accept(&ConnParam::default()).unwrap();
    let e = expect(&c.ch, CmEventType::ConnectError);
    assert_eq!(e.status, -1, "EPERM from the QP's move");
    assert_eq!(c.qp.state().unwrap(), QpState::Err);
    drop(id);
    assert_eq!(expect(&s.ch, CmEventType::Rejected).status, 28);
}

#[test]
fn a_server_that_requires_keys_refuses_a_client_that_offers_none() {
    let (c, s) = (end(197), end(198));
    let _l = listen(&s, 47197, Some(SecureMode::Require));
    let id = resolved(&c, 47197, Some(SecureMode::Answer));
    id.connect(&ConnParam::default()).unwrap();
    let conn = expect(&s.ch, CmEventType::ConnectRequest).new_id.unwrap();
    conn.attach_qp(&s.qp).unwrap();
    let e = conn.accept(&ConnParam::default()).unwrap_err();
    assert!(
        e.to_string().contains("ermitted") || e.to_string().contains("EPERM"),
        "{e}"
    );
    assert_eq!(s.qp.state().unwrap(), QpState::Err);
    drop(conn);
    expect(&c.ch, CmEventType::Rejected);
    assert_eq!(c.qp.state().unwrap(), QpState::Err);
    let _ = &c.pd;
}

#[test]
fn programs_that_move_their_own_qps_get_them_keyed() {
    // UCX's and libfabric's way: no QP given to the CM; the server moves its QP to RTR
    // before accepting (it is keyed as it accepts), the client after CONNECT_RESPONSE.
    let (c, s) = (end(199), end(200));
    let _l = listen(&s, 47199, None);
    let id = CmId::new(&c.ch, &c.ctx, PortSpace::Tcp).unwrap();
    id.set_secure(SecureMode::Require).unwrap();
    id.resolve_addr(None, addr("127.0.0.1:47199")).unwrap();
    expect(&c.ch, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    expect(&c.ch, CmEventType::RouteResolved);
    id.connect(&ConnParam {
        qp_num: c.qp.qpn(),
        ..ConnParam::default()
    })
    .unwrap();
    let conn = expect(&s.ch, CmEventType::ConnectRequest).new_id.unwrap();
    for st in [QpState::Init, QpState::Rtr] {
        s.qp.modify(&conn.init_qp_attr(st).unwrap()).unwrap();
    }
    conn.accept(&ConnParam {
        qp_num: s.qp.qpn(),
        ..ConnParam::default()
    })
    .unwrap();
    s.qp.modify(&conn.init_qp_attr(QpState::Rts).unwrap())
        .unwrap();
    expect(&c.ch, CmEventType::ConnectResponse);
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        c.qp.modify(&id.init_qp_attr(st).unwrap()).unwrap();
    }
    id.establish().unwrap();
    expect(&s.ch, CmEventType::Established);
    assert!(c.qp.is_secure().unwrap() && s.qp.is_secure().unwrap());
    traffic(&c, &s);
}
