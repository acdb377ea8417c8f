//! Two contexts of one device (`Context::open_again`, what a second `ibv_open_device` of
//! one device gives): one NIC, so one GID and QPs that reach each other through it; each
//! context gets the asynchronous events of its own objects only. Over real UDP on
//! 127.0.0.75.

use oxrdma::{
    Access, AsyncEvent, ConnectOptions, Context, EventType, QpCap, QpType, RecvWr, SendData,
    SendWr, WcStatus, WorkCompletion, WrOpcode,
};
use std::time::{Duration, Instant};

fn wait(cq: &oxrdma::CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wcs.len() < n {
        assert!(Instant::now() < deadline, "{} of {n}: {wcs:?}", wcs.len());
        let want = n - wcs.len();
        cq.poll(&mut wcs, want).unwrap();
    }
    wcs
}

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
    let (sa, sb) = (a.random_psn(), b.random_psn());
    let o = ConnectOptions::default();
    // Each QP's endpoint names the one GID: a's QP connects to its own address.
    qa.connect(sa, &qb.endpoint(sb), &o).unwrap();
    qb.connect(sb, &qa.endpoint(sa), &o).unwrap();

    for i in 0..2 {
        srq.post_recv(RecvWr {
            wr_id: i,
            sges: vec![mb.sge(i as usize * 64, 64)],
        })
        .unwrap();
    }
    srq.arm(2).unwrap();
    ma.write(0, b"one nic, two contexts");
    qa.post_send(SendWr::new(
        9,
        WrOpcode::Send,
        SendData::Sges(vec![ma.sge(0, 21)]),
    ))
    .unwrap();
    assert_eq!(wait(&ca, 1)[0].status, WcStatus::Success);
    let got = wait(&cb, 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 21));
    let mut bytes = [0u8; 21];
    assert!(mb.read(0, &mut bytes));
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
