//! RC over real UDP between two devices on loopback addresses (127.0.0.2 and 127.0.0.3).

use oxrdma_core::{
    Access, Gid, QpCap, QpInitAttr, QpType, RecvWr, SendData, SendWr, Sge, SharedBuffer, WcStatus,
    WrOpcode,
};
use oxrdma_sim::pair::{connect_attrs, PairOptions};
use oxrdma_udp::{BindError, UdpPort};

mod device;
use device::Device;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Side {
    dev: Device,
    cq: u32,
    qpn: u32,
    buf: Arc<SharedBuffer>,
    lkey: u32,
    rkey: u32,
    iova: u64,
    psn: u32,
}

fn side(ip: [u8; 4], seed: u8) -> Side {
    let mut dev = Device::open(IpAddr::V4(Ipv4Addr::from(ip)), [seed; 32]).expect("open device");
    let e = &mut dev.engine;
    let pd = e.alloc_pd().unwrap();
    let cq = e.create_cq(1024).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: true,
        srq: None,
    };
    let qpn = e.create_qp(pd, &init).unwrap();
    let buf = Arc::new(SharedBuffer::new(8 << 20).unwrap());
    let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).unwrap();
    let psn = e.random_psn();
    Side {
        dev,
        cq,
        qpn,
        buf,
        lkey: mr.lkey,
        rkey: mr.rkey,
        iova: mr.iova,
        psn,
    }
}

fn connect(a: &mut Side, b: &mut Side) {
    let o = PairOptions {
        mtu: oxrdma_core::Mtu::Mtu4096,
        timeout: 12,
        ..Default::default()
    };
    for attr in connect_attrs(&o, b.dev.link.port().gid(), b.qpn, b.psn, a.psn) {
        a.dev.engine.modify_qp(a.qpn, &attr).unwrap();
    }
    for attr in connect_attrs(&o, a.dev.link.port().gid(), a.qpn, a.psn, b.psn) {
        b.dev.engine.modify_qp(b.qpn, &attr).unwrap();
    }
}

/// Drives both devices until `n` completions have arrived on `a` (10 s at most).
fn run(a: &mut Side, b: &mut Side, n: usize) -> Vec<oxrdma_core::WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wcs = Vec::new();
    while wcs.len() < n {
        assert!(
            Instant::now() < deadline,
            "timed out with {} of {n} completions",
            wcs.len()
        );
        let moved = a.dev.poll().unwrap() + b.dev.poll().unwrap();
        wcs.extend(a.dev.engine.poll_cq(a.cq, usize::MAX).unwrap());
        if moved == 0 {
            a.dev.wait(Duration::from_micros(200)).unwrap();
        }
    }
    wcs
}

#[test]
fn write_read_send_over_udp() {
    let mut a = side([127, 0, 0, 2], 1);
    let mut b = side([127, 0, 0, 3], 2);
    // Every ICRC checked, as from a wire: at MTU 4096 the WRITE's and the READ's packets
    // are sealed from the part the engine took as it copied them (`icrc_part`).
    a.dev.link.port_mut().check_loopback_icrc(true);
    b.dev.link.port_mut().check_loopback_icrc(true);
    connect(&mut a, &mut b);
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    a.buf.write(0, &data);
    let sge = |s: &Side, off: u64, len: usize| Sge {
        addr: s.iova + off,
        length: len as u32,
        lkey: s.lkey,
    };
    // WRITE 3 MB into b, READ it back into a's second half, then a SEND with immediate.
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(&a, 0, data.len())].into()),
    );
    w.remote_addr = b.iova + 4096;
    w.rkey = b.rkey;
    a.dev.engine.post_send(a.qpn, w).unwrap();
    let mut r = SendWr::new(
        2,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(&a, 4 << 20, data.len())].into()),
    );
    r.remote_addr = b.iova + 4096;
    r.rkey = b.rkey;
    a.dev.engine.post_send(a.qpn, r).unwrap();
    b.dev
        .engine
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 7,
                sges: vec![sge(&b, 0, 4096)].into(),
            },
        )
        .unwrap();
    let mut s = SendWr::new(
        3,
        WrOpcode::SendWithImm,
        SendData::Sges(vec![sge(&a, 0, 100)].into()),
    );
    s.imm = 0xcafe;
    a.dev.engine.post_send(a.qpn, s).unwrap();
    let wcs = run(&mut a, &mut b, 3);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let mut back = vec![0u8; data.len()];
    a.buf.read(4 << 20, &mut back);
    assert!(back == data, "READ returned different bytes");
    let r = b.dev.engine.poll_cq(b.cq, 8).unwrap();
    assert_eq!(
        (r[0].wr_id, r[0].byte_len, r[0].imm),
        (7, 100, Some(0xcafe))
    );
    let (sa, sb) = (&a.dev.link.port().stats, &b.dev.link.port().stats);
    assert_eq!(sa.rx_bad_icrc + sb.rx_bad_icrc, 0);
    assert_eq!(sa.icrc_unchecked_loopback + sb.icrc_unchecked_loopback, 0);
    assert!(
        sa.rx > 700 && sb.rx > 700,
        "{} and {} packets",
        sa.rx,
        sb.rx
    );
}

#[test]
fn corrupted_datagrams_are_dropped_by_the_icrc_check() {
    let mut rx = UdpPort::bind(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4))).unwrap();
    rx.check_loopback_icrc(true);
    let mut tx =
        UdpPort::bind_addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5)), 0)).unwrap();
    let mut pkt = vec![0u8; 16];
    pkt[0] = 0x11; // RC ACK
    pkt[2..4].fill(0xff);
    tx.send_to(rx.local_addr(), &mut pkt.clone()).unwrap();
    let mut bad = pkt.clone();
    oxrdma_wire::icrc::fill(&[0x45; 28], &mut bad).ok();
    bad[9] ^= 1;
    // Sent raw (no ICRC recomputation) through a plain socket.
    let raw = std::net::UdpSocket::bind("127.0.0.5:0").unwrap();
    raw.send_to(&bad, rx.local_addr()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = [0u8; 64];
    let got = rx.recv(&mut buf).unwrap();
    assert_eq!(got, Some((Gid::from(Ipv4Addr::new(127, 0, 0, 5)), 16)));
    assert_eq!(rx.recv(&mut buf).unwrap(), None);
    assert_eq!(rx.stats.rx_bad_icrc, 1);
}

#[test]
fn a_taken_address_is_one_clear_error() {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6));
    // Held alone (as Linux rxe holds its port): not shared.
    let alone = UdpPort::bind_alone(ip).unwrap();
    let err = UdpPort::bind(ip).unwrap_err();
    assert!(matches!(err, BindError::InUse { .. }));
    assert!(
        err.to_string().contains("127.0.0.6:4791 is already in use"),
        "{err}"
    );
    drop(alone);
    // Shared: a second port on the address gets another slot of the same group, and no
    // port on it can then be alone.
    let a = UdpPort::bind(ip).unwrap();
    let b = UdpPort::bind(ip).unwrap();
    let (sa, sb) = (a.slot().unwrap(), b.slot().unwrap());
    assert_eq!(sa.key, sb.key);
    assert_ne!(sa.index, sb.index);
    assert!(matches!(
        UdpPort::bind_alone(ip),
        Err(BindError::InUse { .. })
    ));
    let err = UdpPort::bind(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))).unwrap_err();
    assert!(matches!(err, BindError::NotLocal { .. }), "{err}");
}

#[test]
fn transmit_sends_what_was_posted_and_leaves_arrivals_to_the_next_poll() {
    let mut a = side([127, 0, 0, 85], 3);
    let mut b = side([127, 0, 0, 86], 4);
    connect(&mut a, &mut b);
    b.dev
        .engine
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 9,
                sges: vec![Sge {
                    addr: b.iova,
                    length: 64,
                    lkey: b.lkey,
                }]
                .into(),
            },
        )
        .unwrap();
    let mut s = SendWr::new(
        4,
        WrOpcode::Send,
        SendData::Sges(
            vec![Sge {
                addr: a.iova,
                length: 16,
                lkey: a.lkey,
            }]
            .into(),
        ),
    );
    s.flags = oxrdma_core::SendFlags::SIGNALED;
    a.dev.engine.post_send(a.qpn, s).unwrap();
    assert_eq!(a.dev.transmit().unwrap(), 1, "the SEND goes out");
    // b has nothing to send: its transmit takes nothing in, the SEND waits in its socket.
    let deadline = Instant::now() + Duration::from_secs(5);
    b.dev.wait(Duration::from_secs(5)).unwrap();
    assert_eq!(b.dev.transmit().unwrap(), 0);
    assert_eq!(b.dev.engine.stats().rx_packets, 0, "transmit received");
    assert!(b.dev.engine.poll_cq(b.cq, 8).unwrap().is_empty());
    // The next poll takes it in and completes the receive.
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(Instant::now() < deadline, "the SEND never arrived");
        b.dev.poll().unwrap();
        got = b.dev.engine.poll_cq(b.cq, 8).unwrap();
    }
    assert_eq!((got[0].wr_id, got[0].byte_len), (9, 16));
    assert_eq!(b.dev.engine.stats().rx_packets, 1);
}
