//! Pool sockets are connected to their peer, and a connected IPv4 socket numbers its
//! packets' Identification from its own counter: the ICRC of every packet must match the
//! ID the kernel really gave it, as Linux rxe checks it. A raw socket inside a network
//! namespace the test creates sees each packet with its IP header. Needs root (see
//! `common`).

mod common;

use oxrdma_udp::batch::{TxBatch, BATCH};
use oxrdma_udp::UdpPort;
use oxrdma_wire::icrc;
use rustix::net::{AddressFamily, SocketType};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// QPs, each on its own source port.
const QPS: u32 = 3;

/// The length of packet `i` (a GSO run's packets share one; every 16th is short).
fn len_of(i: u32) -> usize {
    if i % 16 == 15 {
        40
    } else {
        64 + 8 * (i % QPS) as usize
    }
}

/// Sends packets `from..to` to `dst`, QP by QP in turn: in full batches (GSO runs) up to
/// `batched`, then one packet per batch, as a ping-pong sends. Packet `i` carries `i`.
fn send(port: &mut UdpPort, dst: SocketAddr, from: u32, to: u32, batched: u32) {
    let mut tx = TxBatch::default();
    for i in from..to {
        let len = len_of(i);
        let slot = tx.next_slot();
        slot[..len].fill(i as u8);
        slot[12..16].copy_from_slice(&i.to_be_bytes());
        tx.push_from(dst, 0xc000 + 97 * (i % QPS) as u16, len);
        if tx.is_full() || i >= batched || i + 1 == to {
            port.send_batch(&mut tx).unwrap();
        }
    }
}

/// Takes what the raw socket saw to `dport` until `want` packets came (or 5 s passed),
/// checks every packet's ICRC against the IP header it had, and returns their IDs.
fn check_all(raw: &OwnedFd, dport: u16, want: u64) -> Vec<u16> {
    let mut ids = Vec::new();
    let mut buf = vec![0u8; 70_000];
    let deadline = Instant::now() + Duration::from_secs(5);
    while (ids.len() as u64) < want && Instant::now() < deadline {
        let got = rustix::net::recv(raw, &mut buf, rustix::net::RecvFlags::DONTWAIT);
        let Ok((len, _)) = got else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let p = &buf[..len];
        // To the receiving port only: a probe (`connected.rs`) may go to the same port
        // number on the sender's address.
        if p[0] != 0x45
            || p[16..20] != [10, 82, 0, 2]
            || u16::from_be_bytes([p[22], p[23]]) != dport
        {
            continue;
        }
        let (sport, first_id) = (
            u16::from_be_bytes([p[20], p[21]]),
            u16::from_be_bytes([p[4], p[5]]),
        );
        // A GSO message may reach the raw socket whole: cut it as the kernel does, at its
        // first packet's length, the k-th segment with ID first + k.
        let payload = &p[28..];
        let seg = len_of(u32::from_be_bytes(payload[12..16].try_into().unwrap()));
        for (k, s) in payload.chunks(seg).enumerate() {
            let id = first_id.wrapping_add(k as u16);
            let h =
                icrc::ipv4_udp_header([10, 82, 0, 1], [10, 82, 0, 2], id, sport, dport, s.len());
            let num = u32::from_be_bytes(s[12..16].try_into().unwrap());
            assert!(
                icrc::verify(&h, s).is_ok(),
                "packet {num} (ID {id}, segment {k} from port {sport}): ICRC wrong"
            );
            ids.push(id);
        }
    }
    ids
}

/// Held by each test for its whole run: the tests of this file run one at a time. One
/// test's `ip` commands fork this process, and the child holds copies of the other's
/// sockets until it execs: a port the other test dropped would still receive (no ICMP
/// error) and could not be bound again (it failed so in 1 run of 40).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A raw socket that sees every UDP packet in the namespace, the sending port and the
/// receiving one.
fn ports() -> (OwnedFd, UdpPort, UdpPort) {
    let raw = rustix::net::socket(
        AddressFamily::INET,
        SocketType::RAW,
        Some(rustix::net::ipproto::UDP),
    )
    .expect("raw socket");
    let tx_port = UdpPort::bind_addr("10.82.0.1:0".parse().unwrap()).unwrap();
    let rx_port = UdpPort::bind_addr("10.82.0.2:0".parse().unwrap()).unwrap();
    (raw, tx_port, rx_port)
}

#[test]
fn every_packet_carries_the_icrc_of_the_id_the_kernel_gave_it() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ns) = common::netns("id", &["10.82.0.1/32", "10.82.0.2/32"]) else {
        return;
    };
    common::inside(&ns, || {
        let (raw, mut tx_port, rx_port) = ports();
        let dst = rx_port.local_addr();
        let n = 2 * BATCH as u32 + 40;
        send(&mut tx_port, dst, 0, n, 2 * BATCH as u32);
        let ids = check_all(&raw, dst.port(), n.into());
        assert_eq!(ids.len(), n as usize, "every packet seen");
        assert!(
            ids.iter()
                .any(|&id| usize::from(id) >= oxrdma_udp::gso::MAX_SEGMENTS),
            "connected sockets' counters are in use (IDs {ids:?})"
        );
        assert_eq!(tx_port.stats.source_ports_refused, 0);
    });
}

#[test]
fn after_a_send_fails_the_counter_is_learned_again() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The peer goes away: each packet to it draws an ICMP port unreachable, which makes the
    // connected socket's next send fail. The device must probe its counter again; whatever
    // leaves must still carry the right ICRC, before, during and after.
    let Some(ns) = common::netns("ie", &["10.82.0.1/32", "10.82.0.2/32"]) else {
        return;
    };
    common::inside(&ns, || {
        let (raw, mut tx_port, rx_port) = ports();
        let dst = rx_port.local_addr();
        send(&mut tx_port, dst, 0, 40, 0);
        drop(rx_port);
        send(&mut tx_port, dst, 40, 80, 0);
        let rx_port = UdpPort::bind_addr(dst).unwrap();
        send(
            &mut tx_port,
            dst,
            80,
            80 + 2 * BATCH as u32,
            80 + 2 * BATCH as u32,
        );
        let sent = tx_port.stats.tx;
        let ids = check_all(&raw, dst.port(), sent);
        assert_eq!(
            ids.len() as u64,
            sent,
            "every packet sent was seen, and verified"
        );
        assert!(
            tx_port.stats.icmp_errors > 0,
            "sends failed while the peer was away"
        );
        assert!(
            sent > 40 + 2 * BATCH as u64,
            "packets left after the errors"
        );
        drop(rx_port);
    });
}
