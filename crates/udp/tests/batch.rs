//! Batched send and receive over real UDP sockets, IPv4 and IPv6.

use oxrdma_udp::batch::{RxBatch, TxBatch, BATCH};
use oxrdma_udp::UdpPort;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Sends `n` numbered packets of assorted lengths from `a` to `b` in batches; returns
/// what `b` received, in order, as (number, ICRC verified).
fn burst(a: SocketAddr, b: SocketAddr, n: usize) -> Vec<(u32, bool)> {
    let mut tx_port = UdpPort::bind_addr(a).unwrap();
    let mut rx_port = UdpPort::bind_addr(b).unwrap();
    let dst = rx_port.local_addr();
    let mut tx = TxBatch::default();
    for i in 0..n {
        let len = 12 + 4 + 4 + i % 200; // BTH, a number, some payload, ICRC
        let slot = tx.next_slot();
        slot[..len].fill(i as u8);
        slot[12..16].copy_from_slice(&(i as u32).to_be_bytes());
        tx.push(dst, len);
        if tx.is_full() || i + 1 == n {
            tx_port.send_batch(&mut tx).unwrap();
        }
    }
    receive(&mut rx_port, n)
}

/// Receives up to `n` datagrams (5 s at most) as (number, ICRC verified).
fn receive(port: &mut UdpPort, n: usize) -> Vec<(u32, bool)> {
    let mut rx = RxBatch::default();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < n && Instant::now() < deadline {
        let k = port.recv_batch(&mut rx).unwrap();
        assert!(k <= BATCH * oxrdma_udp::gso::MAX_SEGMENTS);
        for i in 0..k {
            let d = rx.datagram(i);
            let num = u32::from_be_bytes(d[12..16].try_into().unwrap());
            got.push((num, rx.from(i).is_some()));
        }
        if k == 0 {
            port.wait_readable(Duration::from_millis(10)).unwrap();
        }
    }
    got
}

#[test]
fn a_burst_arrives_whole_and_in_order_v4() {
    let got = burst(
        "127.0.0.7:0".parse().unwrap(),
        "127.0.0.8:0".parse().unwrap(),
        3 * BATCH + 5,
    );
    let want: Vec<(u32, bool)> = (0..3 * BATCH as u32 + 5).map(|i| (i, true)).collect();
    assert_eq!(got, want);
}

#[test]
fn a_burst_arrives_whole_and_in_order_v6() {
    let got = burst(
        "[::1]:0".parse().unwrap(),
        "[::1]:0".parse().unwrap(),
        2 * BATCH + 1,
    );
    let want: Vec<(u32, bool)> = (0..2 * BATCH as u32 + 1).map(|i| (i, true)).collect();
    assert_eq!(got, want);
}

#[test]
fn a_corrupted_datagram_in_a_batch_is_flagged_and_the_rest_pass() {
    let mut tx_port = UdpPort::bind_addr("127.0.0.7:0".parse().unwrap()).unwrap();
    let mut rx_port = UdpPort::bind_addr("127.0.0.8:0".parse().unwrap()).unwrap();
    rx_port.check_loopback_icrc(true);
    let dst = rx_port.local_addr();
    // Not sealed: its ICRC is zero, which is wrong.
    let raw = std::net::UdpSocket::bind("127.0.0.7:0").unwrap();
    let mut tx = TxBatch::default();
    let mut send = |range: std::ops::Range<u32>, tx_port: &mut UdpPort| {
        for i in range {
            let slot = tx.next_slot();
            slot[..24].fill(0);
            slot[12..16].copy_from_slice(&i.to_be_bytes());
            tx.push(dst, 24);
        }
        tx_port.send_batch(&mut tx).unwrap();
    };
    send(0..5, &mut tx_port);
    let mut bad = [0u8; 24];
    bad[12..16].copy_from_slice(&99u32.to_be_bytes());
    raw.send_to(&bad, dst).unwrap();
    send(5..8, &mut tx_port);
    let got = receive(&mut rx_port, 9);
    let mut want: Vec<(u32, bool)> = (0..5).map(|i| (i, true)).collect();
    want.push((99, false));
    want.extend((5..8).map(|i| (i, true)));
    assert_eq!(got, want);
    assert_eq!(rx_port.stats.rx_bad_icrc, 1);
    assert_eq!(rx_port.stats.rx, 9);
}

#[test]
fn each_qp_leaves_from_one_pool_port_in_order_and_the_icrc_holds() {
    let mut tx_port = UdpPort::bind_addr("127.0.0.7:0".parse().unwrap()).unwrap();
    let mut rx_port = UdpPort::bind_addr("127.0.0.8:0".parse().unwrap()).unwrap();
    let dst = rx_port.local_addr();
    // Five QPs asking for their own source ports, their packets interleaved as the
    // engine's round robin gives them; each QP's of one length (so GSO runs form), the
    // last of each batch shorter.
    let (qps, n) = (5u32, 3 * BATCH + 7);
    let mut tx = TxBatch::default();
    for i in 0..n {
        let qp = i as u32 % qps;
        let len = if (i + 1) % BATCH == 0 {
            40
        } else {
            64 + 8 * qp as usize
        };
        let slot = tx.next_slot();
        slot[..len].fill(qp as u8);
        slot[12..16].copy_from_slice(&(i as u32).to_be_bytes());
        tx.push_from(dst, 0xc000 + 97 * qp as u16, len);
        if tx.is_full() || i + 1 == n {
            tx_port.send_batch(&mut tx).unwrap();
        }
    }
    let mut rx = RxBatch::default();
    let mut got: Vec<(u32, u16, bool)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < n && Instant::now() < deadline {
        let k = rx_port.recv_batch(&mut rx).unwrap();
        for i in 0..k {
            let num = u32::from_be_bytes(rx.datagram(i)[12..16].try_into().unwrap());
            let from = rx.from(i);
            got.push((num, from.map_or(0, |a| a.port()), from.is_some()));
        }
        if k == 0 {
            rx_port.wait_readable(Duration::from_millis(10)).unwrap();
        }
    }
    assert_eq!(got.len(), n, "every packet arrives");
    assert!(
        got.iter().all(|g| g.2),
        "every ICRC verifies (source port included)"
    );
    let mut port_of_qp = std::collections::HashMap::new();
    let mut last_of_port = std::collections::HashMap::new();
    for &(num, port, _) in &got {
        assert_ne!(
            port,
            tx_port.local_addr().port(),
            "not from the device's own port"
        );
        let qp = num % qps;
        assert_eq!(
            *port_of_qp.entry(qp).or_insert(port),
            port,
            "QP {qp} keeps one port"
        );
        if let Some(last) = last_of_port.insert(port, num) {
            assert!(
                last < num,
                "port {port}: {num} after {last}: a flow keeps its order"
            );
        }
    }
    let ports: std::collections::HashSet<_> = port_of_qp.values().collect();
    assert!(ports.len() > 1, "QPs spread over more than one source port");
    assert_eq!(tx_port.stats.source_ports_refused, 0);
}

#[test]
fn after_an_empty_receive_one_message_is_taken_alone_and_then_the_rest_together() {
    let mut tx_port = UdpPort::bind_addr("127.0.0.7:0".parse().unwrap()).unwrap();
    let mut rx_port = UdpPort::bind_addr("127.0.0.8:0".parse().unwrap()).unwrap();
    let dst = rx_port.local_addr();
    let mut rx = RxBatch::default();
    assert_eq!(rx_port.recv_batch(&mut rx).unwrap(), 0);
    // Five of different lengths: five messages (GSO glues only equal ones). Loopback
    // queues them before `send_batch` returns.
    let mut tx = TxBatch::default();
    for i in 0..5u32 {
        let len = 24 + 4 * i as usize;
        let slot = tx.next_slot();
        slot[..len].fill(0);
        slot[12..16].copy_from_slice(&i.to_be_bytes());
        tx.push(dst, len);
    }
    tx_port.send_batch(&mut tx).unwrap();
    rx_port.wait_readable(Duration::from_secs(5)).unwrap();
    let numbers = |rx: &RxBatch| -> Vec<u32> {
        (0..rx.count)
            .map(|i| u32::from_be_bytes(rx.datagram(i)[12..16].try_into().unwrap()))
            .collect()
    };
    assert_eq!(rx_port.recv_batch(&mut rx).unwrap(), 1, "the first alone");
    assert_eq!(numbers(&rx), [0]);
    assert_eq!(
        rx_port.recv_batch(&mut rx).unwrap(),
        4,
        "the rest in one call"
    );
    assert_eq!(numbers(&rx), [1, 2, 3, 4]);
    assert!((0..4).all(|i| rx.from(i).is_some()), "every ICRC verifies");
    assert_eq!(rx_port.recv_batch(&mut rx).unwrap(), 0);
}

#[test]
fn from_a_loopback_address_the_icrc_goes_unchecked_and_counted() {
    let mut rx_port = UdpPort::bind_addr("127.0.0.8:0".parse().unwrap()).unwrap();
    let raw = std::net::UdpSocket::bind("127.0.0.7:0").unwrap();
    let mut bad = [0u8; 24];
    bad[12..16].copy_from_slice(&7u32.to_be_bytes());
    raw.send_to(&bad, rx_port.local_addr()).unwrap();
    assert_eq!(receive(&mut rx_port, 1), [(7, true)], "taken, not refused");
    assert_eq!(rx_port.stats.icrc_unchecked_loopback, 1);
    assert_eq!(rx_port.stats.rx_bad_icrc, 0);
}

/// The receive check builds a packet's IP and UDP headers once per source and length:
/// packets of one length from two peers, and of two lengths from one, each pass on their
/// own headers, and a bad one among them still fails.
#[test]
fn each_packet_is_checked_against_its_own_source_and_length() {
    let mut rx_port = UdpPort::bind_addr("127.0.0.10:0".parse().unwrap()).unwrap();
    rx_port.check_loopback_icrc(true);
    let dst = rx_port.local_addr();
    let mut peers = [
        UdpPort::bind_addr("127.0.0.11:0".parse().unwrap()).unwrap(),
        UdpPort::bind_addr("127.0.0.12:0".parse().unwrap()).unwrap(),
    ];
    let raw = std::net::UdpSocket::bind("127.0.0.11:0").unwrap();
    let packet = |num: u32, len: usize| {
        let mut p = vec![0u8; len];
        p[12..16].copy_from_slice(&num.to_be_bytes());
        p
    };
    let mut want = Vec::new();
    for num in 0..12u32 {
        let len = if num % 3 == 2 { 48 } else { 40 };
        let peer = &mut peers[num as usize / 2 % 2];
        peer.send_to(dst, &mut packet(num, len)).unwrap();
        want.push((num, true));
        if num == 6 {
            // Its ICRC is zero, which is wrong.
            raw.send_to(&packet(99, 40), dst).unwrap();
            want.push((99, false));
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(receive(&mut rx_port, want.len()), want);
    assert_eq!(rx_port.stats.rx_bad_icrc, 1);
}

#[test]
fn the_port_counts_messages_and_calls_besides_packets() {
    let mut tx_port = UdpPort::bind_addr("127.0.0.13:0".parse().unwrap()).unwrap();
    let mut rx_port = UdpPort::bind_addr("127.0.0.14:0".parse().unwrap()).unwrap();
    let dst = rx_port.local_addr();
    let mut tx = TxBatch::default();
    // One length: with GSO, one message of all of them (60 KiB fit in one).
    for i in 0..BATCH {
        let slot = tx.next_slot();
        slot[..1000].fill(i as u8);
        slot[12..16].copy_from_slice(&(i as u32).to_be_bytes());
        tx.push(dst, 1000);
    }
    tx_port.send_batch(&mut tx).unwrap();
    let s = tx_port.stats;
    assert_eq!((s.tx, s.tx_calls), (BATCH as u64, 1));
    let want = if tx_port.gso() { 1 } else { BATCH as u64 };
    assert_eq!(s.tx_messages, want, "gso {}", tx_port.gso());
    assert_eq!(receive(&mut rx_port, BATCH).len(), BATCH);
    let r = rx_port.stats;
    assert_eq!(r.rx, BATCH as u64);
    // GRO may glue them as they came or not; each call brought at least one message.
    assert!((1..=BATCH as u64).contains(&r.rx_messages), "{r:?}");
    assert!(r.rx_calls >= 1 && r.rx_calls <= r.rx_messages, "{r:?}");
    assert!(
        s.batching().starts_with(&format!(
            "sent {BATCH} packets in {want} messages ({:.1} a message) by 1 calls",
            BATCH as f64 / want as f64
        )),
        "{}",
        s.batching()
    );
}
