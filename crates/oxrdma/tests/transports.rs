//! UC and UD over real UDP on loopback (127.0.0.71-.74), with the engine threads running.

mod common;
use common::wait;

use oxrdma::{
    Access, ConnectOptions, Context, Gid, QpCap, QpType, RecvWr, SendData, SendWr, UdDest,
    WcOpcode, WcStatus, WrOpcode,
};

/// One end of a connected pair. Fields drop in order: the QP before its CQ and region.
struct End {
    qp: oxrdma::QueuePair,
    mr: oxrdma::MemoryRegion,
    cq: oxrdma::CompletionQueue,
    pd: oxrdma::ProtectionDomain,
    _ctx: Context,
}

/// Two devices on `ips`, a region of `lens` bytes each, a `t` QP each, connected.
fn connected(t: QpType, ips: [&str; 2], lens: [usize; 2]) -> (End, End) {
    let end = |ip: &str, len| {
        let ctx = Context::open(ip.parse().unwrap()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd.register(len, Access::ALL).unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd.create_qp(&cq, &cq, t, QpCap::default()).unwrap();
        End {
            qp,
            mr,
            cq,
            pd,
            _ctx: ctx,
        }
    };
    let (a, b) = (end(ips[0], lens[0]), end(ips[1], lens[1]));
    let o = ConnectOptions::default();
    a.qp.connect(&b.qp.endpoint(), &o).unwrap();
    b.qp.connect(&a.qp.endpoint(), &o).unwrap();
    (a, b)
}

#[test]
fn uc_send_and_write_with_imm_over_udp() {
    let (a, b) = connected(
        QpType::Uc,
        ["127.0.0.71", "127.0.0.72"],
        [64 << 10, 128 << 10],
    );
    let (qa, ma, ca) = (&a.qp, &a.mr, &a.cq);
    let (qb, mb, cb) = (&b.qp, &b.mr, &b.cq);
    let data: Vec<u8> = (0..40_000).map(|i: usize| (i % 251) as u8).collect();
    ma.write(0, &data).unwrap();
    qb.post_recv(RecvWr {
        wr_id: 1,
        sges: vec![mb.sge(0, 64 << 10).unwrap()].into(),
    })
    .unwrap();
    qb.post_recv(RecvWr {
        wr_id: 2,
        sges: vec![].into(),
    })
    .unwrap();
    qa.post_send(SendWr::new(
        10,
        WrOpcode::Send,
        SendData::Sges(vec![ma.sge(0, data.len()).unwrap()].into()),
    ))
    .unwrap();
    let mut w = SendWr::new(
        11,
        WrOpcode::RdmaWriteWithImm,
        SendData::Sges(vec![ma.sge(0, data.len()).unwrap()].into()),
    );
    (w.remote_addr, w.rkey, w.imm) = (mb.addr() + (64 << 10), mb.rkey(), 0x1234);
    qa.post_send(w).unwrap();
    let sent = wait(ca, 2);
    assert!(
        sent.iter().all(|w| w.status == WcStatus::Success),
        "{sent:?}"
    );
    let got = wait(cb, 2);
    assert_eq!((got[0].wr_id, got[0].byte_len), (1, data.len() as u32));
    assert_eq!(
        (got[1].wr_id, got[1].imm, got[1].opcode),
        (2, Some(0x1234), WcOpcode::RecvRdmaWithImm)
    );
    let mut back = vec![0u8; data.len()];
    mb.read(0, &mut back).unwrap();
    assert!(back == data);
    mb.read(64 << 10, &mut back).unwrap();
    assert!(back == data);
}

#[test]
fn ud_ping_pong_over_udp_answers_the_source_from_the_completion() {
    let (a, b) = (
        Context::open("127.0.0.73".parse().unwrap()).unwrap(),
        Context::open("127.0.0.74".parse().unwrap()).unwrap(),
    );
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.register(16384, Access::ALL).unwrap(),
        pb.register(16384, Access::ALL).unwrap(),
    );
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Ud, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Ud, QpCap::default())
        .unwrap();
    const QKEY: u32 = 0x11111111;
    qa.ready_ud(QKEY).unwrap();
    qb.ready_ud(QKEY).unwrap();
    let mtu = a.active_mtu().bytes();
    for (qp, mr) in [(&qa, &ma), (&qb, &mb)] {
        qp.post_recv(RecvWr {
            wr_id: 7,
            sges: vec![mr.sge(4096, 40 + mtu.min(4096)).unwrap()].into(),
        })
        .unwrap();
    }
    // a → b, to b's GID.
    ma.write(0, b"ping from a").unwrap();
    let ah = pa.create_ah(b.gid()).unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![ma.sge(0, 11).unwrap()].into()),
    );
    w.ud = Some(UdDest {
        ah: ah.id(),
        remote_qpn: qb.qpn(),
        remote_qkey: QKEY,
    });
    qa.post_send(w).unwrap();
    let got = wait(&cb, 1)[0];
    assert_eq!((got.status, got.byte_len), (WcStatus::Success, 40 + 11));
    assert_eq!(got.src_qp, qa.qpn());
    assert_eq!(got.src_gid, Some(a.gid()));
    let mut m = [0u8; 11];
    mb.read(4096 + 40, &mut m).unwrap();
    assert_eq!(&m, b"ping from a");
    // The IPv4 header in the GRH area names the sender.
    let mut grh = [0u8; 40];
    mb.read(4096, &mut grh).unwrap();
    assert_eq!(
        Gid::from(std::net::Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35])),
        a.gid()
    );
    // b answers whoever it was, from the completion alone.
    let back = pb.create_ah(got.src_gid.unwrap()).unwrap();
    mb.write(0, b"pong").unwrap();
    let mut w = SendWr::new(
        2,
        WrOpcode::SendWithImm,
        SendData::Sges(vec![mb.sge(0, 4).unwrap()].into()),
    );
    w.imm = 99;
    w.ud = Some(UdDest {
        ah: back.id(),
        remote_qpn: got.src_qp,
        remote_qkey: 0x8000_0000, // "use my own Q_Key"
    });
    qb.post_send(w).unwrap();
    let got = wait(&ca, 2);
    let recv = got.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
    assert_eq!(
        (recv.byte_len, recv.imm, recv.src_qp),
        (44, Some(99), qb.qpn())
    );
    // Longer than the MTU: refused at post, nothing sent.
    let mut w = SendWr::new(
        3,
        WrOpcode::Send,
        SendData::Sges(vec![ma.sge(0, mtu + 1).unwrap()].into()),
    );
    w.ud = Some(UdDest {
        ah: ah.id(),
        remote_qpn: qb.qpn(),
        remote_qkey: QKEY,
    });
    let big = pa.register(mtu + 1, Access::ALL).unwrap();
    w.data = SendData::Sges(vec![big.sge(0, mtu + 1).unwrap()].into());
    assert!(qa.post_send(w).is_err());
}

#[test]
fn srq_over_udp_serves_two_rc_qps_and_signals_its_limit() {
    let (a, b) = (
        Context::open("127.0.0.75".parse().unwrap()).unwrap(),
        Context::open("127.0.0.76".parse().unwrap()).unwrap(),
    );
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.register(4096, Access::ALL).unwrap(),
        pb.register(4096, Access::ALL).unwrap(),
    );
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let srq = pb.create_srq(16, 1, 0).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let qa = pa
            .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
            .unwrap();
        let qb = pb
            .create_qp_on_srq(&cb, &cb, QpType::Rc, QpCap::default(), Some(&srq))
            .unwrap();
        qa.connect(&qb.endpoint(), &ConnectOptions::default())
            .unwrap();
        qb.connect(&qa.endpoint(), &ConnectOptions::default())
            .unwrap();
        pairs.push((qa, qb));
    }
    for i in 0..4 {
        srq.post_recv(RecvWr {
            wr_id: i,
            sges: vec![mb.sge(i as usize * 64, 64).unwrap()].into(),
        })
        .unwrap();
    }
    srq.arm(2).unwrap();
    for (i, (qa, _)) in pairs.iter().chain(pairs.iter()).enumerate().take(3) {
        ma.write(0, &[i as u8; 8]).unwrap();
        qa.post_send(SendWr::new(
            i as u64,
            WrOpcode::Send,
            SendData::Sges(vec![ma.sge(0, 8).unwrap()].into()),
        ))
        .unwrap();
        wait(&ca, 1);
    }
    let got = wait(&cb, 3);
    let qpns: Vec<u32> = got.iter().map(|w| w.qp_num).collect();
    assert_eq!(
        qpns,
        vec![pairs[0].1.qpn(), pairs[1].1.qpn(), pairs[0].1.qpn()]
    );
    assert_eq!(
        got.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(srq.query().unwrap().posted, 1);
    let events: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(
                e,
                oxrdma::AsyncEvent::Srq {
                    event: oxrdma::EventType::SrqLimitReached,
                    ..
                }
            ))
            .count(),
        1,
        "{events:?}"
    );
}

#[test]
fn memory_windows_over_udp() {
    let (a, b) = connected(QpType::Rc, ["127.0.0.77", "127.0.0.78"], [4096, 8192]);
    let (qa, ma, ca) = (&a.qp, &a.mr, &a.cq);
    let (qb, mb, cb, pb) = (&b.qp, &b.mr, &b.cq, &b.pd);
    // Type 2: bound by a work request on b's QP, closed by a's SEND_WITH_INV.
    let mw = pb.alloc_mw(oxrdma::MwType::Type2).unwrap();
    let bind = mb.window(&mw, 4096, 4096, Access::REMOTE_WRITE);
    let mut wr = SendWr::new(1, WrOpcode::BindMw, SendData::Sges(vec![].into()));
    wr.bind = Some(bind);
    qb.post_send(wr).unwrap();
    assert_eq!(wait(cb, 1)[0].opcode, WcOpcode::BindMw);
    assert_eq!(mw.rkey(), bind.rkey);
    ma.write(0, b"through the window").unwrap();
    let mut w = SendWr::new(
        2,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![ma.sge(0, 18).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (mb.addr() + 5000, mw.rkey());
    qa.post_send(w).unwrap();
    assert_eq!(wait(ca, 1)[0].status, WcStatus::Success);
    let mut got = [0u8; 18];
    mb.read(5000, &mut got).unwrap();
    assert_eq!(&got, b"through the window");
    qb.post_recv(RecvWr {
        wr_id: 3,
        sges: vec![mb.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    let mut s = SendWr::new(
        4,
        WrOpcode::SendWithInv,
        SendData::Sges(vec![ma.sge(0, 4).unwrap()].into()),
    );
    s.invalidate_rkey = mw.rkey();
    qa.post_send(s).unwrap();
    assert_eq!(wait(ca, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(cb, 1)[0].invalidated_rkey, Some(mw.rkey()));
    let mut w = SendWr::new(
        5,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![ma.sge(0, 4).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (mb.addr() + 5000, mw.rkey());
    qa.post_send(w).unwrap();
    assert_eq!(wait(ca, 1)[0].status, WcStatus::RemAccessErr);
}
