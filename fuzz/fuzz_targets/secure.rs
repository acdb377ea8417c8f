//! Packets for a secure RC QP (`oxrdma_core::secure`): each either sealed with the peer's
//! key (so what the fuzzer writes gets past the AEAD and reaches the transport behind it)
//! or as the fuzzer wrote it (a forgery, which must only be counted), picked by a flag
//! byte; a sealed one is sometimes delivered twice (a replay) or with a bit flipped. The
//! engine must never panic, never take a forgery, and keep answering. Every suite.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::secure::{Secured, Suite, TRAILER};
use oxrdma_core::{Engine, Gid, MAX_PACKET};

/// Delivers a packet that must be refused: it is dropped and counted, one drop.
fn refused(e: &mut Engine, now: u64, peer: Gid, pkt: &[u8]) {
    let before = e.stats().rx_drops.total();
    e.handle_packet(now, peer, pkt);
    assert_eq!(e.stats().rx_drops.total(), before + 1, "a forgery was taken: {pkt:02x?}");
}

mod common;

fuzz_target!(|data: &[u8]| {
    // Each suite in turn, by the input's length.
    let suite = Suite::ALL[data.len() % Suite::ALL.len()];
    let common::Target { mut e, qpn, cq, .. } = common::target_with(0, Some(suite));
    let mut peer_key = Secured::new(&common::secure_keys(qpn, suite).1);
    let peer = common::peer();
    let mut out = vec![0u8; MAX_PACKET];
    let mut now = 0;
    // Input: packets, each a flag byte, a length byte, then that many bytes; the BTH's QPN
    // is pointed at our QP so the fuzzer need not guess it.
    let mut rest = data;
    while let [flags, n, tail @ ..] = rest {
        let n = usize::from(*n).min(tail.len());
        let mut pkt = tail[..n].to_vec();
        rest = &tail[n..];
        if pkt.len() >= 8 {
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        if flags & 1 == 1 && pkt.len() >= 16 && pkt.len() + TRAILER <= MAX_PACKET {
            // Sealed by the peer: its last 4 bytes stand for the ICRC field.
            let len = pkt.len();
            pkt.resize(len + TRAILER, 0);
            let len = peer_key.seal(&mut pkt, len);
            pkt.truncate(len);
            // Byte 4 of the BTH is not authenticated (the ICRC masks it too), nor the ICRC.
            let at = usize::from(flags >> 3) % (len - 4);
            if flags & 2 == 2 && at != 4 {
                pkt[at] ^= 0x80;
                refused(&mut e, now, peer, &pkt);
            } else {
                e.handle_packet(now, peer, &pkt);
                if flags & 4 == 4 {
                    refused(&mut e, now, peer, &pkt);
                }
            }
        } else {
            refused(&mut e, now, peer, &pkt);
        }
        while e.poll_transmit(now, &mut out).is_some() {}
        now += 50_000;
        e.handle_timeout(now);
        while e.poll_transmit(now, &mut out).is_some() {}
        while e.poll_event().is_some() {}
    }
    let _ = e.poll_cq(cq, usize::MAX);
});
