//! The RDMA CM over real UDP: a listener and a connecting id on two devices of this host
//! (127.0.0.101-110), which find each other through the per-host rendezvous when the
//! client connects to 127.0.0.1; REQ/REP/RTU, data over the connection, DREQ/DREP and
//! timewait; rejections, SIDR for UD, a connection whose caller moves its own QP.

mod common;
use common::{next_event as next, wait};

use oxrdma::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use oxrdma::{
    Access, Context, QpCap, QpState, QpType, RecvWr, SendData, SendWr, WcStatus, WrOpcode,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn ctx(last: u8) -> Context {
    Context::open(format!("127.0.0.{last}").parse().unwrap()).unwrap()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn expect(ch: &EventChannel, what: CmEventType) -> CmEvent {
    let e = next(ch);
    assert_eq!(e.event, what, "status {}", e.status);
    e
}

/// A server device with a listener on `bind` (its channel `chs`), a client device (its
/// channel `chc`), and a PD and CQ on each.
struct Pair {
    cc: Context,
    chs: EventChannel,
    chc: EventChannel,
    listener: CmId,
    ps: oxrdma::ProtectionDomain,
    pc: oxrdma::ProtectionDomain,
    cqs: oxrdma::CompletionQueue,
    cqc: oxrdma::CompletionQueue,
}

fn pair(server: u8, bind: &str, space: PortSpace) -> Pair {
    let (cs, cc) = (ctx(server), ctx(server + 1));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listener = CmId::new(&chs, &cs, space).unwrap();
    listener.bind_addr(addr(bind)).unwrap();
    listener.listen(4).unwrap();
    let (ps, pc) = (cs.alloc_pd().unwrap(), cc.alloc_pd().unwrap());
    let (cqs, cqc) = (cs.create_cq(8).unwrap(), cc.create_cq(8).unwrap());
    Pair {
        cc,
        chs,
        chc,
        listener,
        ps,
        pc,
        cqs,
        cqc,
    }
}

impl Pair {
    /// An RC QP on the server (`true`) or the client.
    fn qp(&self, server: bool) -> oxrdma::QueuePair {
        let (pd, cq) = if server {
            (&self.ps, &self.cqs)
        } else {
            (&self.pc, &self.cqc)
        };
        pd.create_qp(cq, cq, QpType::Rc, QpCap::default()).unwrap()
    }

    /// An RC connection requested to `dst` with a QP attached on each side, not yet
    /// accepted: the client's id and QP, the server's new id and QP.
    fn requested(&self, dst: &str) -> (CmId, oxrdma::QueuePair, CmId, oxrdma::QueuePair) {
        let (qs, qc) = (self.qp(true), self.qp(false));
        let id = self.resolved(dst);
        id.attach_qp(&qc).unwrap();
        id.connect(&ConnParam::default()).unwrap();
        let conn = expect(&self.chs, CmEventType::ConnectRequest)
            .new_id
            .unwrap();
        conn.attach_qp(&qs).unwrap();
        (id, qc, conn, qs)
    }

    /// A client id with its address and route resolved towards `dst` (events taken).
    fn resolved(&self, dst: &str) -> CmId {
        let id = CmId::new(&self.chc, &self.cc, PortSpace::Tcp).unwrap();
        id.resolve_addr(None, addr(dst)).unwrap();
        expect(&self.chc, CmEventType::AddrResolved);
        id.resolve_route().unwrap();
        expect(&self.chc, CmEventType::RouteResolved);
        id
    }
}

#[test]
fn rc_connect_to_localhost_moves_data_and_disconnects_cleanly() {
    let p = pair(101, "0.0.0.0:47101", PortSpace::Tcp);
    let (chs, chc, listener) = (&p.chs, &p.chc, &p.listener);
    let id = p.resolved("127.0.0.1:47101");
    let (mc, ms) = (
        p.pc.register(4096, Access::ALL).unwrap(),
        p.ps.register(4096, Access::ALL).unwrap(),
    );
    let (qc_cq, qs_cq) = (&p.cqc, &p.cqs);
    let qc = p.qp(false);
    id.attach_qp(&qc).unwrap();
    assert_eq!(qc.state().unwrap(), QpState::Init);
    let param = ConnParam {
        private_data: b"hello".to_vec(),
        ..ConnParam::default()
    };
    id.connect(&param).unwrap();

    let req = expect(chs, CmEventType::ConnectRequest);
    assert_eq!(req.listen_id, Some(listener.key()));
    assert_eq!(
        req.conn.private_data.len(),
        56,
        "REQ's 92 bytes less the CMA header"
    );
    assert_eq!(&req.conn.private_data[..5], b"hello");
    assert_eq!(req.conn.qp_num, qc.qpn());
    let conn = req.new_id.unwrap();
    assert_eq!(
        conn.peer_addr().unwrap().port(),
        id.local_addr().unwrap().port()
    );
    let qs = p.qp(true);
    conn.attach_qp(&qs).unwrap();
    qs.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![ms.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    conn.accept(&ConnParam {
        private_data: b"welcome".to_vec(),
        ..ConnParam::default()
    })
    .unwrap();
    assert_eq!(qs.state().unwrap(), QpState::Rts);

    let est = expect(chc, CmEventType::Established);
    assert_eq!(est.conn.private_data.len(), 196);
    assert_eq!(&est.conn.private_data[..7], b"welcome");
    assert_eq!(est.conn.qp_num, qs.qpn());
    assert_eq!(qc.state().unwrap(), QpState::Rts);
    assert_eq!(expect(chs, CmEventType::Established).id, conn.key());

    // Data both ways over the connection the CM set up.
    mc.write(0, b"over the cm").unwrap();
    qc.post_send(SendWr::new(
        7,
        WrOpcode::Send,
        SendData::Sges(vec![mc.sge(0, 11).unwrap()].into()),
    ))
    .unwrap();
    assert_eq!(wait(qc_cq, 1)[0].status, WcStatus::Success);
    let got = wait(qs_cq, 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 11));
    let mut buf = [0u8; 11];
    ms.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"over the cm");
    ms.write(100, b"written back").unwrap();
    let mut w = SendWr::new(
        8,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![ms.sge(100, 12).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (mc.addr() + 100, mc.rkey());
    qs.post_send(w).unwrap();
    assert_eq!(wait(qs_cq, 1)[0].status, WcStatus::Success);
    let mut buf = [0u8; 12];
    mc.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"written back");

    id.disconnect().unwrap();
    assert_eq!(qc.state().unwrap(), QpState::Err);
    expect(chs, CmEventType::Disconnected);
    conn.disconnect().unwrap();
    expect(chc, CmEventType::Disconnected);
    // Timewait: about 2 s on each side.
    expect(chc, CmEventType::TimewaitExit);
    expect(chs, CmEventType::TimewaitExit);
    assert!(chc.try_event().is_none() && chs.try_event().is_none());
}

#[test]
fn a_port_nobody_listens_on_is_rejected_with_8_and_a_second_listener_is_refused() {
    let (cs, cc) = (ctx(103), ctx(104));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let id = CmId::new(&chc, &cc, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, addr("127.0.0.1:47103")).unwrap();
    expect(&chc, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    expect(&chc, CmEventType::RouteResolved);
    id.connect(&ConnParam::default()).unwrap();
    let t = Instant::now();
    assert_eq!(expect(&chc, CmEventType::Rejected).status, 8);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "answered, not timed out"
    );

    let a = CmId::new(&chs, &cs, PortSpace::Tcp).unwrap();
    a.bind_addr(addr("0.0.0.0:47104")).unwrap();
    a.listen(1).unwrap();
    let b = CmId::new(&chs, &cc, PortSpace::Tcp).unwrap();
    let e = b.bind_addr(addr("127.0.0.1:47104")).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    // Another port space is another port.
    let u = CmId::new(&chs, &cc, PortSpace::Udp).unwrap();
    u.bind_addr(addr("127.0.0.1:47104")).unwrap();
    u.listen(1).unwrap();
    drop(a);
    let c = CmId::new(&chs, &cc, PortSpace::Tcp).unwrap();
    c.bind_addr(addr("127.0.0.1:47104")).unwrap();
    c.listen(1).unwrap();
}

#[test]
fn a_rejected_request_carries_the_reason_and_private_data() {
    let (cs, cc) = (ctx(105), ctx(106));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listener = CmId::new(&chs, &cs, PortSpace::Tcp).unwrap();
    // Bound to its device's address; the client connects to 127.0.0.1.
    listener.bind_addr(addr("127.0.0.105:47105")).unwrap();
    listener.listen(4).unwrap();
    let id = CmId::new(&chc, &cc, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, addr("127.0.0.1:47105")).unwrap();
    id.resolve_route().unwrap();
    let pc = cc.alloc_pd().unwrap();
    let cq = cc.create_cq(4).unwrap();
    let qp = pc
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    id.attach_qp(&qp).unwrap();
    id.connect(&ConnParam::default()).unwrap();
    expect(&chc, CmEventType::AddrResolved);
    expect(&chc, CmEventType::RouteResolved);
    let req = expect(&chs, CmEventType::ConnectRequest);
    req.new_id.unwrap().reject(b"not today").unwrap();
    let rej = expect(&chc, CmEventType::Rejected);
    assert_eq!(rej.status, 28);
    assert_eq!(rej.conn.private_data.len(), 148);
    assert_eq!(&rej.conn.private_data[..9], b"not today");
    assert_eq!(
        qp.state().unwrap(),
        QpState::Err,
        "librdmacm moves the QP to ERR"
    );
}

#[test]
fn ud_resolves_the_peer_qp_through_sidr_and_datagrams_flow() {
    let (cs, cc) = (ctx(107), ctx(108));
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listener = CmId::new(&chs, &cs, PortSpace::Udp).unwrap();
    listener.bind_addr(addr("0.0.0.0:47107")).unwrap();
    listener.listen(4).unwrap();
    let (ps, pc) = (cs.alloc_pd().unwrap(), cc.alloc_pd().unwrap());
    let (cqs, cqc) = (cs.create_cq(8).unwrap(), cc.create_cq(8).unwrap());
    let qs = ps
        .create_qp(&cqs, &cqs, QpType::Ud, QpCap::default())
        .unwrap();
    let qc = pc
        .create_qp(&cqc, &cqc, QpType::Ud, QpCap::default())
        .unwrap();
    let ms = ps.register(4096, Access::ALL).unwrap();
    let mc = pc.register(4096, Access::ALL).unwrap();

    let id = CmId::new(&chc, &cc, PortSpace::Udp).unwrap();
    id.resolve_addr(None, addr("127.0.0.1:47107")).unwrap();
    expect(&chc, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    expect(&chc, CmEventType::RouteResolved);
    id.attach_qp(&qc).unwrap();
    assert_eq!(qc.state().unwrap(), QpState::Rts);
    id.connect(&ConnParam {
        private_data: b"ud?".to_vec(),
        ..ConnParam::default()
    })
    .unwrap();
    let req = expect(&chs, CmEventType::ConnectRequest);
    let ud = req.ud.as_ref().unwrap();
    assert_eq!(
        ud.private_data.len(),
        180,
        "SIDR_REQ's 216 bytes less the CMA header"
    );
    assert_eq!(&ud.private_data[..3], b"ud?");
    let conn = req.new_id.unwrap();
    conn.attach_qp(&qs).unwrap();
    conn.accept(&ConnParam {
        private_data: b"ud!".to_vec(),
        ..ConnParam::default()
    })
    .unwrap();
    let est = expect(&chc, CmEventType::Established);
    let ud = est.ud.unwrap();
    assert_eq!((ud.qp_num, ud.qkey), (qs.qpn(), oxrdma::cm::UDP_QKEY));
    assert_eq!(ud.private_data.len(), 136);
    assert_eq!(&ud.private_data[..3], b"ud!");

    qs.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![ms.sge(0, 40 + 64).unwrap()].into(),
    })
    .unwrap();
    let ah = pc.create_ah(ud.dgid).unwrap();
    mc.write(0, b"datagram").unwrap();
    let mut w = SendWr::new(
        3,
        WrOpcode::Send,
        SendData::Sges(vec![mc.sge(0, 8).unwrap()].into()),
    );
    w.ud = Some(oxrdma::UdDest {
        ah: ah.id(),
        remote_qpn: ud.qp_num,
        remote_qkey: ud.qkey,
    });
    qc.post_send(w).unwrap();
    assert_eq!(wait(&cqc, 1)[0].status, WcStatus::Success);
    let got = wait(&cqs, 1);
    assert_eq!(
        (got[0].status, got[0].byte_len),
        (WcStatus::Success, 40 + 8)
    );
    let mut buf = [0u8; 8];
    ms.read(40, &mut buf).unwrap();
    assert_eq!(&buf, b"datagram");
}

#[test]
fn a_caller_that_moves_its_own_qp_gets_connect_response_and_establishes() {
    // libfabric's and UCX's way: no QP given to the CM; rdma_init_qp_attr, then
    // rdma_establish after CONNECT_RESPONSE.
    let p = pair(109, "[::]:47109", PortSpace::Tcp);
    let (qs, qc) = (p.qp(true), p.qp(false));
    // IPv6 loopback to an IPv4 device: the rendezvous still finds the listener.
    let id = p.resolved("[::1]:47109");
    id.connect(&ConnParam {
        qp_num: qc.qpn(),
        ..ConnParam::default()
    })
    .unwrap();
    let (chs, chc, ps, pc, cqc) = (&p.chs, &p.chc, &p.ps, &p.pc, &p.cqc);
    let req = expect(chs, CmEventType::ConnectRequest);
    let conn = req.new_id.unwrap();
    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
        qs.modify(&conn.init_qp_attr(s).unwrap()).unwrap();
    }
    conn.accept(&ConnParam {
        qp_num: qs.qpn(),
        ..ConnParam::default()
    })
    .unwrap();
    let resp = expect(chc, CmEventType::ConnectResponse);
    assert_eq!(resp.conn.qp_num, qs.qpn());
    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
        qc.modify(&id.init_qp_attr(s).unwrap()).unwrap();
    }
    id.establish().unwrap();
    expect(chs, CmEventType::Established);
    let ms = ps.register(64, Access::ALL).unwrap();
    let mc = pc.register(64, Access::ALL).unwrap();
    mc.write(0, b"self-moved").unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![mc.sge(0, 10).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (ms.addr(), ms.rkey());
    qc.post_send(w).unwrap();
    assert_eq!(wait(cqc, 1)[0].status, WcStatus::Success);
    let mut buf = [0u8; 10];
    ms.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"self-moved");
    drop(id); // destroying a connected id disconnects it
    expect(chs, CmEventType::Disconnected);
}

#[test]
fn the_event_channel_descriptor_polls_readable_exactly_while_events_wait() {
    use rustix::event::{poll, PollFd, PollFlags};
    let c = ctx(111);
    let ch = EventChannel::new().unwrap();
    let readable = |ch: &EventChannel| {
        let mut p = [PollFd::new(ch, PollFlags::IN)];
        poll(&mut p, Some(&rustix::time::Timespec::default())).unwrap() == 1
    };
    assert!(!readable(&ch));
    let id = CmId::new(&ch, &c, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, addr("127.0.0.1:47111")).unwrap();
    assert!(readable(&ch));
    assert_eq!(
        ch.get_event().unwrap().unwrap().event,
        CmEventType::AddrResolved
    );
    assert!(!readable(&ch));
}

#[test]
fn migrated_ids_get_their_events_on_the_new_channel() {
    let (cs, cc) = (ctx(114), ctx(115));
    let (a, b, chc) = (
        EventChannel::new().unwrap(),
        EventChannel::new().unwrap(),
        EventChannel::new().unwrap(),
    );
    let listener = CmId::new(&a, &cs, PortSpace::Tcp).unwrap();
    listener.bind_addr(addr("0.0.0.0:47114")).unwrap();
    listener.listen(4).unwrap();
    // libfabric's passive endpoint: made on one channel, bound to its event queue's.
    listener.migrate(&b).unwrap();
    let id = CmId::new(&chc, &cc, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, addr("127.0.0.1:47114")).unwrap();
    id.resolve_route().unwrap();
    // Its events wait on chc; moved to `a`, the ones already there come along, in order.
    id.migrate(&a).unwrap();
    assert!(chc.try_event().is_none());
    expect(&a, CmEventType::AddrResolved);
    expect(&a, CmEventType::RouteResolved);
    id.connect(&ConnParam {
        qp_num: 0x11,
        ..ConnParam::default()
    })
    .unwrap();
    let req = expect(&b, CmEventType::ConnectRequest);
    assert!(
        a.try_event().is_none(),
        "nothing for the listener on its old channel"
    );
    let conn = req.new_id.unwrap();
    conn.accept(&ConnParam {
        qp_num: 0x22,
        ..ConnParam::default()
    })
    .unwrap();
    expect(&a, CmEventType::ConnectResponse);
    id.establish().unwrap();
    expect(&b, CmEventType::Established);
    // The accepted connection moves to a channel of its own; its disconnect comes there.
    let own = EventChannel::new().unwrap();
    conn.migrate(&own).unwrap();
    id.disconnect().unwrap();
    expect(&own, CmEventType::Disconnected);
    assert!(b.try_event().is_none());
}

#[test]
fn a_qp_that_fails_after_established_still_disconnects_cleanly() {
    let p = pair(116, "0.0.0.0:47116", PortSpace::Tcp);
    let (id, qc, conn, _qs) = p.requested("127.0.0.1:47116");
    let (chs, chc, pc, cqc) = (&p.chs, &p.chc, &p.pc, &p.cqc);
    conn.accept(&ConnParam::default()).unwrap();
    expect(chc, CmEventType::Established);
    expect(chs, CmEventType::Established);
    // A WRITE to a key the server never gave: the server NAKs, the client's QP fails.
    let mc = pc.register(64, Access::ALL).unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![mc.sge(0, 8).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (0x1000, 0xdead);
    qc.post_send(w).unwrap();
    assert_eq!(wait(cqc, 1)[0].status, WcStatus::RemAccessErr);
    assert_eq!(qc.state().unwrap(), QpState::Err);
    // The connection still ends as any does: DREQ, DREP, timewait on both sides.
    id.disconnect().unwrap();
    expect(chs, CmEventType::Disconnected);
    conn.disconnect().unwrap();
    expect(chc, CmEventType::Disconnected);
    expect(chc, CmEventType::TimewaitExit);
    expect(chs, CmEventType::TimewaitExit);
}

#[test]
fn a_qp_that_cannot_take_the_rep_gives_connect_error_and_the_rej_waits_for_destroy() {
    // librdmacm's way, which the C library shares (`cm/steps.rs`): the QP to ERR,
    // CONNECT_ERROR with the move's errno, nothing on the wire until the id is destroyed.
    let p = pair(118, "0.0.0.0:47118", PortSpace::Tcp);
    let (id, qc, conn, qs) = p.requested("127.0.0.1:47118");
    let (chs, chc) = (&p.chs, &p.chc);
    // The client's QP fails before the REP comes: ERR cannot go to RTR.
    qc.modify(&oxrdma::QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    })
    .unwrap();
    conn.accept(&ConnParam::default()).unwrap();
    let e = expect(chc, CmEventType::ConnectError);
    assert_eq!(e.status, -22, "EINVAL from the QP's move");
    assert_eq!(qc.state().unwrap(), QpState::Err);
    // No REJ: the server hears nothing while the client's id lives...
    std::thread::sleep(Duration::from_millis(300));
    assert!(chs.try_event().is_none(), "the server heard of the error");
    // ...and REJECTED (28, consumer defined) once it is destroyed.
    drop(id);
    let rej = expect(chs, CmEventType::Rejected);
    assert_eq!(rej.status, 28);
    assert_eq!(qs.state().unwrap(), QpState::Err);
    assert!(chc.try_event().is_none(), "nothing after CONNECT_ERROR");
}
