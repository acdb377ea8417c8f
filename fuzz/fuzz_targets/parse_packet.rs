//! Any bytes: the packet parser and the ICRC code must not panic, and whatever parses must
//! survive emit → parse unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_wire::{icrc, PacketRepr};

fuzz_target!(|data: &[u8]| {
    // The first byte picks how much of the input is an IP+UDP header for the ICRC.
    let (split, rest) = match data.split_first() {
        Some((&s, rest)) => (usize::from(s) % 69, rest),
        None => return,
    };
    let (ip_udp, packet) = rest.split_at(split.min(rest.len()));
    let _ = icrc::verify(ip_udp, packet);
    let _ = icrc::compute(ip_udp, packet);
    if let Ok(p) = PacketRepr::parse(packet) {
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).expect("a parsed packet must emit");
        assert_eq!(n, buf.len());
        assert_eq!(PacketRepr::parse(&buf).expect("emitted packet must parse"), p);
        let _ = icrc::fill(ip_udp, &mut buf);
    }
});
