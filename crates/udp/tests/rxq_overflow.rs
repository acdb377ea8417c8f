//! Datagrams the kernel drops because a port's receive buffer is full are counted
//! (`SO_RXQ_OVFL`): a flood the port does not read meanwhile, then one datagram more,
//! which carries the socket's drop count; every datagram is then either received or
//! counted as dropped.

use oxrdma_udp::batch::RxBatch;
use oxrdma_udp::UdpPort;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};

#[test]
fn a_full_receive_buffer_s_drops_are_counted() {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 131));
    let mut port = UdpPort::bind_alone(ip).expect("bind");
    let to = port.local_addr();
    let sender = UdpSocket::bind((ip, 0)).unwrap();
    // More than the largest receive buffer the port takes (32 MiB as root): each 1 KiB
    // datagram costs the buffer about twice its size.
    let junk = [0x5au8; 1024];
    let flood = 40_000;
    for _ in 0..flood {
        sender.send_to(&junk, to).unwrap();
    }
    let mut batch = RxBatch::new(port.gro());
    let mut received = 0;
    let mut drain = |port: &mut UdpPort| loop {
        match port.recv_batch(&mut batch).unwrap() {
            0 => break,
            n => received += n as u64,
        }
    };
    drain(&mut port);
    assert_eq!(port.stats.rx_overflow, 0, "no message after the drops yet");
    sender.send_to(&junk, to).unwrap();
    drain(&mut port);
    let dropped = port.stats.rx_overflow;
    println!("{received} received, {dropped} dropped by the kernel");
    assert!(dropped > 0, "{received} received of {}", flood + 1);
    assert_eq!(received + dropped, flood + 1);
}
