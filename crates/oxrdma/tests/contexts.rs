//! Two contexts of one device (`Context::open_again`, what a second `ibv_open_device` of
//! one device gives): one NIC, so one GID and QPs that reach each other through it; each
//! context gets the asynchronous events of its own objects only. Over real UDP on
//! 127.0.0.75.

mod common;
use common::wait;

use oxrdma::{
    Access, AsyncEvent, ConnectOptions, Context, EventType, QpCap, QpType, RecvWr, SendData,
    SendWr, WcStatus, WrOpcode,
};
use std::time::{Duration, Instant};

#[test]
fn two_contexts_of_one_device_share_the_nic_and_keep_their_events() {
    let a = Context::open("127.0.0.75".parse().unwrap()).unwrap();
    let b = a.open_again().unwrap();
    assert!(a.same_device(&b));
    assert_eq!(a.gid(), b.gid());
    let weak = a.weak_device();
    assert!(weak.is_open());

    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.register(4096, Access::ALL).unwrap(),
        pb.register(4096, Access::ALL).unwrap(),
    );
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let srq = pb.create_srq(8, 1, 0).unwrap();
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp_on_srq(&cb, &cb, QpType::Rc, QpCap::default(), Some(&srq))
        .unwrap();
    let o = ConnectOptions::default();
    // Each QP's endpoint names the one GID: a's QP connects to its own address.
    qa.connect(&qb.endpoint(), &o).unwrap();
    qb.connect(&qa.endpoint(), &o).unwrap();

    for i in 0..2 {
        srq.post_recv(RecvWr {
            wr_id: i,
            sges: vec![mb.sge(i as usize * 64, 64).unwrap()].into(),
        })
        .unwrap();
    }
    srq.arm(2).unwrap();
    ma.write(0, b"one nic, two contexts").unwrap();
    qa.post_send(SendWr::new(
        9,
        WrOpcode::Send,
        SendData::Sges(vec![ma.sge(0, 21).unwrap()].into()),
    ))
    .unwrap();
    assert_eq!(wait(&ca, 1)[0].status, WcStatus::Success);
    let got = wait(&cb, 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 21));
    let mut bytes = [0u8; 21];
    mb.read(0, &mut bytes).unwrap();
    assert_eq!(&bytes, b"one nic, two contexts");

    // The SRQ (b's) fell to its limit: b gets the event, a gets nothing.
    let deadline = Instant::now() + Duration::from_secs(5);
    let ev = loop {
        if let Some(e) = b.poll_event() {
            break e;
        }
        assert!(Instant::now() < deadline, "no SRQ limit event on b");
        std::thread::yield_now();
    };
    assert!(
        matches!(
            ev,
            AsyncEvent::Srq {
                event: EventType::SrqLimitReached,
                ..
            }
        ),
        "{ev:?}"
    );
    assert_eq!(a.poll_event(), None, "a got an event of b's object");

    // The device stays open while either context does.
    drop((qa, qb, srq, ca, cb, ma, mb, pa, pb));
    drop(a);
    assert!(weak.is_open());
    let c = weak.open_again().expect("b holds the device").unwrap();
    assert_eq!(c.gid(), b.gid());
    drop((b, c));
    assert!(!weak.is_open());
    assert!(weak.open_again().is_none());
}

#[test]
fn a_post_list_rings_the_doorbell_once() {
    let ctx = Context::open("127.0.0.76".parse().unwrap()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(4096, Access::ALL).unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        ..QpCap::default()
    };
    let (qa, qb) = (
        pd.create_qp(&cq, &cq, QpType::Rc, cap).unwrap(),
        pd.create_qp(&cq, &cq, QpType::Rc, cap).unwrap(),
    );
    let o = ConnectOptions::default();
    qa.connect(&qb.endpoint(), &o).unwrap();
    qb.connect(&qa.endpoint(), &o).unwrap();
    let write = |i: u64| {
        let mut w = SendWr::new(
            i,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![mr.sge(0, 8).unwrap()].into()),
        );
        (w.remote_addr, w.rkey) = (mr.addr() + 8 * (i % 500), mr.rkey());
        w
    };
    let before = ctx.doorbells();
    {
        let mut list = qa.post_list();
        for i in 0..32 {
            list.post_send(write(i)).unwrap();
        }
        // A WR the QP refuses fails alone; those before it stay posted.
        let mut bad = write(99);
        bad.data = SendData::Inline(vec![0; 1 << 16].into()); // beyond max_inline_data
        assert!(list.post_send(bad).is_err());
    }
    assert_eq!(ctx.doorbells() - before, 1, "one doorbell for a list of 32");
    let wcs = wait(&cq, 32);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let before = ctx.doorbells();
    for i in 0..32 {
        qa.post_send(write(i)).unwrap();
    }
    assert_eq!(ctx.doorbells() - before, 32, "one doorbell per single post");
    wait(&cq, 32);
    // An empty list rings nothing.
    let before = ctx.doorbells();
    drop(qa.post_list());
    assert_eq!(ctx.doorbells(), before);
}
