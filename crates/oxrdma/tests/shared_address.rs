//! Devices that share one address (127.0.0.87), as the processes of a host share a NIC's:
//! each device owns a slot of the address's QPNs, and the kernel hands every packet to
//! the device whose QPN it names. Here the devices are in one process (each its own member
//! of the address's group, as a process would be); the CLI's tests run them as processes.

mod common;
use common::wait;

use oxrdma::{
    Access, CompletionQueue, ConnectOptions, Context, MemoryRegion, QpCap, QpType, QueuePair,
    RecvWr, SendData, SendWr, WcStatus, WrOpcode,
};

struct Side {
    ctx: Context,
    pd: oxrdma::ProtectionDomain,
    mr: MemoryRegion,
    cq: CompletionQueue,
    qps: Vec<QueuePair>,
}

fn side(ip: &str, nqp: usize) -> Side {
    let ctx = Context::open(ip.parse().unwrap()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(1 << 20, Access::ALL).unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let qps = (0..nqp)
        .map(|_| {
            pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())
                .unwrap()
        })
        .collect();
    Side {
        ctx,
        pd,
        mr,
        cq,
        qps,
    }
}

fn connect(a: &Side, qa: usize, b: &Side, qb: usize) {
    let (ea, eb) = (a.qps[qa].endpoint(), b.qps[qb].endpoint());
    a.qps[qa].connect(&eb, &ConnectOptions::default()).unwrap();
    b.qps[qb].connect(&ea, &ConnectOptions::default()).unwrap();
}

/// A 256 KiB WRITE of `seed`'s bytes from `a`'s QP `qa` into `b`'s region at `off`, then a
/// SEND that `b` receives; both sides' data checked.
fn write_then_send(a: &Side, qa: usize, b: &Side, qb: usize, off: usize, seed: u8) {
    let len = 256 << 10;
    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
    a.mr.write(off, &data).unwrap();
    b.qps[qb]
        .post_recv(RecvWr {
            wr_id: u64::from(seed),
            sges: vec![b.mr.sge(off + len, 64).unwrap()].into(),
        })
        .unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![a.mr.sge(off, len).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (b.mr.addr() + off as u64, b.mr.rkey());
    a.qps[qa].post_send(w).unwrap();
    a.qps[qa]
        .post_send(SendWr::new(
            2,
            WrOpcode::Send,
            SendData::Inline(vec![seed; 64].into()),
        ))
        .unwrap();
    let wcs = wait(&a.cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let r = wait(&b.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status),
        (u64::from(seed), WcStatus::Success)
    );
    let mut back = vec![0u8; len + 64];
    b.mr.read(off, &mut back).unwrap();
    assert!(back[..len] == data[..], "WRITE {seed}");
    assert!(back[len..].iter().all(|&x| x == seed), "SEND {seed}");
}

#[test]
fn devices_sharing_an_address_each_get_their_own_packets() {
    // Two devices on .87 (two members of its group), one on .88.
    let a1 = side("127.0.0.87", 2);
    let a2 = side("127.0.0.87", 2);
    let b = side("127.0.0.88", 2);
    assert_eq!(a1.ctx.gid(), a2.ctx.gid(), "one address, one GID");
    // Each device's QPNs are its own slot's.
    let slot = |s: &Side| {
        let qpns: Vec<u32> = s.qps.iter().map(QueuePair::qpn).collect();
        qpns
    };
    let (q1, q2) = (slot(&a1), slot(&a2));
    assert!(q1.iter().all(|q| !q2.contains(q)), "{q1:x?} {q2:x?}");
    connect(&a1, 0, &b, 0);
    connect(&a2, 0, &b, 1);
    // The two devices of .87 reach each other through it, by QPN alone.
    connect(&a1, 1, &a2, 1);
    for round in 0..3u8 {
        write_then_send(&a1, 0, &b, 0, 0, 3 + round);
        write_then_send(&b, 1, &a2, 0, 0, 5 + round);
        write_then_send(&a2, 1, &a1, 1, 0, 7 + round);
        write_then_send(&a1, 1, &a2, 1, 300 << 10, 9 + round);
    }
}

#[test]
fn a_device_that_leaves_frees_its_slot_and_the_others_go_on() {
    let a1 = side("127.0.0.93", 1);
    let b = side("127.0.0.94", 5);
    connect(&a1, 0, &b, 0);
    write_then_send(&a1, 0, &b, 0, 0, 1);
    // Another device on .93 comes and goes, four times (taking the slot the last one
    // left): the first device's QP goes on as if nothing happened.
    for round in 0..4u8 {
        let a2 = side("127.0.0.93", 1);
        let q = usize::from(round) + 1;
        connect(&a2, 0, &b, q);
        write_then_send(&a2, 0, &b, q, 0, 11 + round);
        write_then_send(&b, 0, &a1, 0, 0, 21 + round);
        drop(a2);
        write_then_send(&a1, 0, &b, 0, 0, 31 + round);
    }
}

/// The next CM event on `ch` (within 10 s), which must be `what`.
fn expect(ch: &oxrdma::cm::EventChannel, what: oxrdma::cm::CmEventType) -> oxrdma::cm::CmEvent {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(e) = ch.try_event() {
            assert_eq!(e.event, what, "status {}", e.status);
            return e;
        }
        assert!(std::time::Instant::now() < deadline, "no {what:?} in 10 s");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The connection manager between shared addresses: the REQ reaches the device that
/// listens (not the one that joined the address first, which takes what nobody claims),
/// and the REP and RTU reach the devices whose comm IDs they name.
#[test]
fn connection_requests_reach_the_listener_among_the_devices_of_an_address() {
    use oxrdma::cm::{CmEventType, CmId, ConnParam, EventChannel, PortSpace};
    let _first_s = Context::open("127.0.0.99".parse().unwrap()).unwrap();
    let _first_c = Context::open("127.0.0.100".parse().unwrap()).unwrap();
    let s = side("127.0.0.99", 0);
    let c = side("127.0.0.100", 0);
    let (chs, chc) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listener = CmId::new(&chs, &s.ctx, PortSpace::Tcp).unwrap();
    listener
        .bind_addr("127.0.0.99:47199".parse().unwrap())
        .unwrap();
    listener.listen(4).unwrap();
    let id = CmId::new(&chc, &c.ctx, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, "127.0.0.99:47199".parse().unwrap())
        .unwrap();
    expect(&chc, CmEventType::AddrResolved);
    id.resolve_route().unwrap();
    expect(&chc, CmEventType::RouteResolved);
    let qc =
        c.pd.create_qp(&c.cq, &c.cq, QpType::Rc, QpCap::default())
            .unwrap();
    id.attach_qp(&qc).unwrap();
    id.connect(&ConnParam::default()).unwrap();
    let req = expect(&chs, CmEventType::ConnectRequest);
    let conn = req.new_id.unwrap();
    let qs =
        s.pd.create_qp(&s.cq, &s.cq, QpType::Rc, QpCap::default())
            .unwrap();
    conn.attach_qp(&qs).unwrap();
    qs.post_recv(RecvWr {
        wr_id: 5,
        sges: vec![s.mr.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    conn.accept(&ConnParam::default()).unwrap();
    expect(&chc, CmEventType::Established);
    expect(&chs, CmEventType::Established);
    qc.post_send(SendWr::new(
        6,
        WrOpcode::Send,
        SendData::Inline(b"through the cm"[..].into()),
    ))
    .unwrap();
    assert_eq!(wait(&c.cq, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(&s.cq, 1)[0].byte_len, 14);
    id.disconnect().unwrap();
    expect(&chs, CmEventType::Disconnected);
}
