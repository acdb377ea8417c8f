//! Arbitrary packets aimed at a QP of each transport (RC, UC or UD, chosen by the first
//! byte; with an SRQ and a bound type 2 memory window on some runs, and work of its own in
//! flight): the engine must never panic, whatever arrives, and must keep answering.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::MAX_PACKET;

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, data)) = data.split_first() else { return };
    let common::Target { mut e, qpn, cq, .. } = common::target(kind);
    let peer = common::peer();
    let mut out = vec![0u8; MAX_PACKET];
    let mut now = 0;
    // Input: packets, each a length byte then that many bytes; the BTH's QPN is pointed at
    // our QP so the fuzzer need not guess it.
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let mut pkt = tail[..n].to_vec();
        rest = &tail[n..];
        if pkt.len() >= 8 {
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        e.handle_packet(now, peer, &pkt);
        while e.poll_transmit(now, &mut out).is_some() {}
        now += 50_000;
        e.handle_timeout(now);
        while e.poll_transmit(now, &mut out).is_some() {}
        while e.poll_event().is_some() {}
    }
    let _ = e.poll_cq(cq, usize::MAX);
});
