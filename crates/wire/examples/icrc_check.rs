//! What a receiver's ICRC check costs per packet: a stream of IPv4 packets from one peer
//! (IDs counting up, as Linux numbers a connected socket's) checked as the UDP driver does,
//! for 8 B WRITEs and 1 KiB and 4 KiB segments. Prints nanoseconds per packet.
//!   cargo run --release -p oxrdma-wire --example icrc_check

use oxrdma_wire::icrc::{fill, ipv4_udp_header};
use oxrdma_wire::icrc_id::IdVerifier;
use std::time::Instant;

fn main() {
    for payload in [8usize, 1024, 4096] {
        // BTH + RETH + payload + ICRC, 16 packets with consecutive IDs, checked in turn.
        let len = 12 + 16 + payload + 4;
        let packets: Vec<([u8; 28], Vec<u8>)> = (0..16u16)
            .map(|i| {
                let mut p: Vec<u8> = (0..len).map(|b| (b as u8).wrapping_mul(31)).collect();
                p[0] = 0x0a; // RC RDMA WRITE ONLY
                let h = ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 1000 + i, 49152, 4791, len);
                fill(&h, &mut p).expect("fill");
                (h, p)
            })
            .collect();
        // The receiver's headers: the ID is what it solves for, so it holds 0 (as the UDP
        // driver's do).
        let h0 = ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 0, 49152, 4791, len);
        let mut v = IdVerifier::default();
        let n = 2_000_000 / (1 + payload / 256);
        let t = Instant::now();
        for i in 0..n {
            let (_, p) = &packets[i % packets.len()];
            assert!(v.verify(&h0, p).is_ok());
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!("{payload:5} B payload: {ns:6.1} ns per packet checked");
    }
}
