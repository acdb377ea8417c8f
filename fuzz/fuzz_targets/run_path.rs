//! The run path against the per-packet path on arbitrary packets: twin engines (the same
//! QP, work and memory) get the same packets, one through `handle_packets` in runs, the
//! other one by one; everything they send, signal and complete, their counters and their
//! memory must stay the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::{Engine, Stats, MAX_PACKET};

mod common;

/// Everything `e` has to send, and its async events.
fn output(e: &mut Engine, now: u64) -> (Vec<Vec<u8>>, Vec<String>) {
    let mut out = vec![0u8; MAX_PACKET];
    let mut sent = Vec::new();
    while let Some(t) = e.poll_transmit(now, &mut out) {
        sent.push(out[..t.len].to_vec());
    }
    let events = std::iter::from_fn(|| e.poll_event()).map(|ev| format!("{ev:?}")).collect();
    (sent, events)
}

fn counters(e: &Engine) -> Stats {
    Stats { rx_run: 0, ..e.stats() }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, data)) = data.split_first() else { return };
    let mut twins = [common::target(kind), common::target(kind)];
    let peer = common::peer();
    let qpn = twins[0].qpn;
    let mut now = 0;
    // Input: records, each a flags byte, then (unless it repeats) a 2-byte length and that
    // many bytes. Flags: bit 0, a new run starts here; bit 1, the last packet again with the
    // next PSN and its RETH's address one 256-byte MTU on (the next packet of a stream).
    let (mut runs, mut last): (Vec<Vec<Vec<u8>>>, Vec<u8>) = (Vec::new(), Vec::new());
    let mut rest = data;
    while let Some((&flags, tail)) = rest.split_first() {
        rest = tail;
        let mut pkt = if flags & 2 != 0 && last.len() >= 28 {
            let mut p = last.clone();
            let psn = u32::from_be_bytes([0, p[9], p[10], p[11]]).wrapping_add(1);
            p[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            let va = u64::from_be_bytes(p[12..20].try_into().unwrap()).wrapping_add(256);
            p[12..20].copy_from_slice(&va.to_be_bytes());
            p
        } else {
            let Some((len, tail)) = rest.split_first_chunk::<2>() else { break };
            let n = usize::from(u16::from_be_bytes(*len)).min(tail.len()).min(MAX_PACKET);
            rest = &tail[n..];
            tail[..n].to_vec()
        };
        if pkt.len() >= 8 {
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        last = pkt.clone();
        match runs.last_mut() {
            Some(run) if flags & 1 == 0 => run.push(pkt),
            _ => runs.push(vec![pkt]),
        }
    }
    for run in &runs {
        twins[0].e.handle_packets(now, peer, false, run.iter().map(|p| &p[..]));
        for p in run {
            twins[1].e.handle_packet_ecn(now, peer, p, false);
        }
        let [a, b] = &mut twins;
        assert_eq!(output(&mut a.e, now), output(&mut b.e, now), "what the twins send");
        assert_eq!(counters(&a.e), counters(&b.e));
        now += 50_000;
        a.e.handle_timeout(now);
        b.e.handle_timeout(now);
        assert_eq!(output(&mut a.e, now), output(&mut b.e, now), "after the timers");
    }
    let [a, b] = &mut twins;
    assert_eq!(a.e.poll_cq(a.cq, usize::MAX).ok(), b.e.poll_cq(b.cq, usize::MAX).ok());
    let mem = |t: &common::Target| {
        let mut m = vec![0u8; t.buf.len()];
        t.buf.read(0, &mut m);
        m
    };
    assert!(mem(a) == mem(b), "the twins' memory");
});
