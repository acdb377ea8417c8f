//! Any bytes as an iWARP stream: an MPA request or reply, then FPDUs (with and without
//! CRC) whose DDP segments carry RDMAP headers. Nothing may panic, and whatever parses
//! must be written back to bytes that parse the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_wire::iwarp::ddp::{DdpRepr, ReadRequestRepr, TerminateRepr};
use oxrdma_wire::iwarp::mpa::{self, EnhancedRepr, MpaFrameRepr};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    if let Ok((f, n)) = MpaFrameRepr::parse(data) {
        let mut out = vec![0u8; n];
        assert_eq!(f.emit(&mut out), Ok(n));
        assert_eq!(MpaFrameRepr::parse(&out), Ok((f, n)));
        if let Ok(e) = EnhancedRepr::parse(f.private_data) {
            let mut b = [0u8; 4];
            e.emit(&mut b).expect("14-bit values emit");
            assert_eq!(EnhancedRepr::parse(&b), Ok(e));
        }
        at = n;
    }
    let crc = data.first().is_some_and(|b| b & 1 == 1);
    while let Ok((seg, n)) = mpa::parse_fpdu(&data[at..], crc) {
        at += n;
        let mut again = vec![0u8; n];
        again[2..2 + seg.len()].copy_from_slice(seg);
        assert_eq!(mpa::seal(&mut again, seg.len(), crc), Ok(n));
        assert_eq!(mpa::parse_fpdu(&again, crc), Ok((seg, n)));
        let Ok((h, len)) = DdpRepr::parse(seg) else {
            continue;
        };
        let mut out = [0u8; 18];
        assert_eq!(h.emit(&mut out), Ok(len));
        assert_eq!(DdpRepr::parse(&out[..len]), Ok((h, len)));
        if let Ok(r) = ReadRequestRepr::parse(&seg[len..]) {
            let mut b = [0u8; ReadRequestRepr::LEN];
            r.emit(&mut b).expect("fits");
            assert_eq!(ReadRequestRepr::parse(&b), Ok(r));
        }
        if let Ok(t) = TerminateRepr::parse(&seg[len..]) {
            let mut b = [0u8; TerminateRepr::LEN];
            t.emit(&mut b).expect("4-bit values emit");
            assert_eq!(TerminateRepr::parse(&b), Ok(t));
        }
    }
});
