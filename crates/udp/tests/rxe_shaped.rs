//! The receive path takes RoCEv2 packets shaped as Linux rxe sends them, over IPv6 and IPv4:
//! a per-QP UDP source port (0xC000 + hash), a non-zero traffic class and flow label, hop
//! limit 255, and a UDP checksum that is zero (what rxe sends) or correct. Packets with a
//! wrong ICRC or from a source that is not the connected peer are still dropped, each under
//! its own counter.
//!
//! The packets are written with a raw socket (the IP header as rxe's kernel builds it) inside
//! a network namespace the test creates, with the three addresses on its loopback; nothing
//! leaves it. Needs root; without it the test says SKIPPED, and fails instead when
//! `OXRDMA_CI` is set (CI runs as root, so there it must really run).

use oxrdma_core::{
    Access, Gid, QpCap, QpInitAttr, QpType, RecvWr, RxDrop, SendData, SendWr, Sge, SharedBuffer,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use oxrdma_sim::pair::{connect_attrs, PairOptions};
use oxrdma_wire::{
    checksum, icrc, AethRepr, BthRepr, ExtHeaders, Opcode, PacketRepr, Psn, Syndrome,
};
use rustix::net::{AddressFamily, SendFlags, SocketType};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
mod device;
use common::{inside, netns};
use device::Device;

const PEER_QPN: u32 = 0x11;
const PEER_PSN: u32 = 0x00ab_cdef;
const MY_PSN: u32 = 0x0012_3456;
/// rxe's source port for a QP pair: 0xC000 | hash (any value in that range will do).
const RXE_SPORT: u16 = 0xC0AB;

/// How one packet is dressed on the wire.
#[derive(Clone, Copy)]
struct Shape {
    src: IpAddr,
    udp_checksum: bool,
    corrupt_icrc: bool,
    dport: u16,
}

/// The IP header (as rxe's kernel writes it) + UDP header + `roce` (BTH..ICRC), with the
/// ICRC computed over exactly these headers.
fn frame(shape: Shape, dst: IpAddr, roce: &mut [u8]) -> Vec<u8> {
    let udp_len = (8 + roce.len()) as u16;
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&RXE_SPORT.to_be_bytes());
    udp[2..4].copy_from_slice(&shape.dport.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let (mut ip_hdr, addrs) = match (shape.src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut h = vec![0u8; 40];
            // Version 6, traffic class 0x12, flow label 0xabcde.
            h[0..4].copy_from_slice(&(6u32 << 28 | 0x12 << 20 | 0xabcde).to_be_bytes());
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = 17;
            h[7] = 255;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            let addrs = h[8..40].to_vec();
            (h, addrs)
        }
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0u8; 20];
            h[0] = 0x45;
            h[1] = 0x12; // TOS
            h[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            h[4..6].copy_from_slice(&0x1234u16.to_be_bytes()); // Identification
            h[6] = 0x40; // DF
            h[8] = 255; // TTL
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            checksum::fill_ipv4(&mut h);
            let addrs = h[12..20].to_vec();
            (h, addrs)
        }
        _ => unreachable!("one family per test"),
    };
    let mut ip_udp = ip_hdr.clone();
    ip_udp.extend_from_slice(&udp);
    icrc::fill(&ip_udp, roce).unwrap();
    if shape.corrupt_icrc {
        *roce.last_mut().unwrap() ^= 0x5a;
    }
    if shape.udp_checksum {
        let mut datagram = udp.to_vec();
        datagram.extend_from_slice(roce);
        let (src, dst) = addrs.split_at(addrs.len() / 2);
        let c = checksum::udp(src, dst, &datagram);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
    }
    ip_hdr.extend_from_slice(&udp);
    ip_hdr.extend_from_slice(roce);
    ip_hdr
}

/// Sends one packet through a raw socket that carries its own IP header.
fn send_raw(raw: &OwnedFd, shape: Shape, dst: IpAddr, packet: &PacketRepr<'_>) {
    let mut roce = vec![0u8; packet.buffer_len()];
    packet.emit(&mut roce).unwrap();
    let bytes = frame(shape, dst, &mut roce);
    // The port is ignored for raw sockets; the address picks the route.
    rustix::net::sendto(raw, &bytes, SendFlags::empty(), &SocketAddr::new(dst, 0))
        .expect("raw send");
}

fn send_only(dest_qpn: u32, psn: u32, payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn,
            ack_req: true,
            psn: Psn::new(psn),
            selective_repeat: false,
        },
        ext: ExtHeaders::default(),
        payload,
    }
}

fn ack(dest_qpn: u32, psn: u32, msn: u32) -> PacketRepr<'static> {
    let mut p = send_only(dest_qpn, psn, &[]);
    p.bth.opcode = Opcode::RC_ACKNOWLEDGE;
    p.bth.ack_req = false;
    p.ext.aeth = Some(AethRepr {
        syndrome: Syndrome::Ack { credits: 31 },
        msn,
    });
    p
}

struct Host {
    dev: Device,
    cq: u32,
    qpn: u32,
    buf: Arc<SharedBuffer>,
    lkey: u32,
    iova: u64,
}

impl Host {
    /// A device on `me` with one RC QP connected to (`peer`, PEER_QPN) and receives posted.
    fn open(me: IpAddr, peer: IpAddr) -> Host {
        let mut dev = Device::open(me, [7; 32]).expect("open device");
        let e = &mut dev.engine;
        let pd = e.alloc_pd().unwrap();
        let cq = e.create_cq(64).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap::default(),
            sq_sig_all: true,
            srq: None,
        };
        let qpn = e.create_qp(pd, &init).unwrap();
        let buf = Arc::new(SharedBuffer::new(1 << 16).unwrap());
        let mr = e.reg_mr(pd, buf.clone(), None, Access::ALL).unwrap();
        let (lkey, iova) = (mr.lkey, mr.iova);
        let o = PairOptions {
            mtu: oxrdma_core::Mtu::Mtu1024,
            ..Default::default()
        };
        for attr in connect_attrs(&o, Gid::from(peer), PEER_QPN, PEER_PSN, MY_PSN) {
            e.modify_qp(qpn, &attr).unwrap();
        }
        for i in 0..8u64 {
            let sges = vec![Sge {
                addr: iova + i * 1024,
                length: 1024,
                lkey,
            }];
            e.post_recv(
                qpn,
                RecvWr {
                    wr_id: i,
                    sges: sges.into(),
                },
            )
            .unwrap();
        }
        Host {
            dev,
            cq,
            qpn,
            buf,
            lkey,
            iova,
        }
    }

    /// Drives the device until `done` holds (2 s at most); returns the completions seen.
    fn drive_until(&mut self, done: &dyn Fn(&Host, usize) -> bool) -> Vec<WorkCompletion> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut wcs = Vec::new();
        while !done(self, wcs.len()) && Instant::now() < deadline {
            self.dev.poll().unwrap();
            wcs.extend(self.dev.engine.poll_cq(self.cq, 64).unwrap());
            self.dev.wait(Duration::from_millis(1)).unwrap();
        }
        wcs
    }

    fn recv_one(&mut self) -> WorkCompletion {
        let wcs = self.drive_until(&|_, n| n > 0);
        assert_eq!(
            wcs.len(),
            1,
            "expected one completion; drops: {}",
            self.dev.rx_drops()
        );
        wcs[0]
    }

    fn drops(&self, why: RxDrop) -> u64 {
        self.dev.engine.stats().rx_drops.get(why)
    }
}

fn accepts_rxe_shaped_packets(me: IpAddr, peer: IpAddr, forger: IpAddr, family: AddressFamily) {
    let mut h = Host::open(me, peer);
    let raw = rustix::net::socket(family, SocketType::RAW, Some(rustix::net::ipproto::RAW))
        .expect("raw socket");
    let rxe = |udp_checksum| Shape {
        src: peer,
        udp_checksum,
        corrupt_icrc: false,
        dport: oxrdma_wire::ROCE_V2_PORT,
    };
    let mut psn = PEER_PSN;
    // Zero UDP checksum (what rxe sends), then a correct one: both delivered, in order.
    for (i, csum) in [(0, false), (1, true)] {
        let msg = format!("rxe-shaped message {i}");
        send_raw(&raw, rxe(csum), me, &send_only(h.qpn, psn, msg.as_bytes()));
        let wc = h.recv_one();
        assert_eq!(
            (wc.status, wc.opcode, wc.wr_id, wc.byte_len),
            (WcStatus::Success, WcOpcode::Recv, i, msg.len() as u32),
            "udp checksum {csum}"
        );
        let mut got = vec![0u8; msg.len()];
        assert!(h.buf.read(i as usize * 1024, &mut got));
        assert_eq!(got, msg.as_bytes());
        psn += 1;
    }

    // A wrong ICRC: counted by the port, never delivered.
    let bad = Shape {
        corrupt_icrc: true,
        ..rxe(false)
    };
    send_raw(&raw, bad, me, &send_only(h.qpn, psn, b"corrupted"));
    let wcs = h.drive_until(&|h, _| h.dev.link.port().stats.rx_bad_icrc > 0);
    assert!(wcs.is_empty(), "{wcs:?}");
    assert_eq!(h.dev.link.port().stats.rx_bad_icrc, 1);

    // A valid packet from an address that is not the connected peer: counted, dropped.
    let forged = Shape {
        src: forger,
        ..rxe(true)
    };
    send_raw(&raw, forged, me, &send_only(h.qpn, psn, b"forged"));
    let wcs = h.drive_until(&|h, _| h.drops(RxDrop::WrongPeer) > 0);
    assert!(wcs.is_empty(), "{wcs:?}");
    assert_eq!(h.drops(RxDrop::WrongPeer), 1);
    let report = h.dev.rx_drops().to_string();
    assert!(report.contains("1 bad ICRC"), "{report}");
    assert!(
        report.contains("1 source is not the connected peer"),
        "{report}"
    );

    // Neither moved the responder: the real next message still lands at this PSN.
    send_raw(&raw, rxe(false), me, &send_only(h.qpn, psn, b"third"));
    let wc = h.recv_one();
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::Success, 2, 5)
    );

    // The requester's side: our SEND (towards nobody) is completed by an ACK shaped as
    // rxe's, with a zero UDP checksum.
    let sge = Sge {
        addr: h.iova + 8 * 1024,
        length: 100,
        lkey: h.lkey,
    };
    let wr = SendWr::new(77, WrOpcode::Send, SendData::Sges(vec![sge].into()));
    h.dev.engine.post_send(h.qpn, wr).unwrap();
    h.dev.poll().unwrap();
    send_raw(&raw, rxe(false), me, &ack(h.qpn, MY_PSN, 1));
    let wc = h.recv_one();
    assert_eq!((wc.wr_id, wc.status), (77, WcStatus::Success));
    let total = h.dev.engine.stats().rx_drops.total();
    assert_eq!(total, 1, "only the forged packet: {}", h.dev.rx_drops());

    // What the kernel drops before any socket sees it shows in the report too: a zero UDP
    // checksum to an ordinary socket (the fate of every rxe packet over IPv6 before the
    // port accepted them).
    if family == AddressFamily::INET6 {
        let plain = std::net::UdpSocket::bind((me, 0)).unwrap();
        let to_plain = Shape {
            dport: plain.local_addr().unwrap().port(),
            ..rxe(false)
        };
        send_raw(&raw, to_plain, me, &send_only(h.qpn, psn + 1, b"x"));
        let d = h.drive_until(&|h, _| h.dev.rx_drops().kernel.checksum > 0);
        assert!(d.is_empty());
        let kernel = h.dev.rx_drops().kernel;
        assert_eq!(kernel.checksum, 1, "{kernel}");
        assert!(h.dev.rx_drops().to_string().contains("1 bad UDP checksum"));
    }
}

#[test]
fn rxe_shaped_ipv6_packets_are_accepted() {
    let Some(ns) = netns("6", &["fd81::fe/128", "fd81::1/128", "fd81::66/128"]) else {
        return;
    };
    inside(&ns, || {
        accepts_rxe_shaped_packets(
            "fd81::fe".parse().unwrap(),
            "fd81::1".parse().unwrap(),
            "fd81::66".parse().unwrap(),
            AddressFamily::INET6,
        )
    });
}

#[test]
fn rxe_shaped_ipv4_packets_are_accepted() {
    let Some(ns) = netns("4", &["10.81.0.254/32", "10.81.0.1/32", "10.81.0.66/32"]) else {
        return;
    };
    inside(&ns, || {
        accepts_rxe_shaped_packets(
            "10.81.0.254".parse().unwrap(),
            "10.81.0.1".parse().unwrap(),
            "10.81.0.66".parse().unwrap(),
            AddressFamily::INET,
        )
    });
}
