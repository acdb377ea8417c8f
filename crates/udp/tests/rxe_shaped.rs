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

use oxrdma_core::{RxDrop, SendData, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use rustix::net::{AddressFamily, SocketType};
use std::net::IpAddr;

mod common;
mod device;
mod forge;
use common::{inside, netns};
use forge::{ack, send_only, send_raw, Host, Shape, MY_PSN, PEER_PSN};

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
