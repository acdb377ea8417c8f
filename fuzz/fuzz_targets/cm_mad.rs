//! Any bytes as a MAD: the header and the CM message under its attribute ID must parse
//! without a panic, and whatever parses must be written back to bytes that parse the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_wire::cm::CmMessage;
use oxrdma_wire::mad::{MadHeader, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = MadHeader::parse(data) else {
        return;
    };
    let Ok(m) = CmMessage::parse(h.attr_id, &data[MAD_HEADER_LEN..]) else {
        assert!(data.len() < MAD_LEN, "a whole MAD's data must parse");
        return;
    };
    let mut out = vec![0u8; MAD_LEN];
    h.emit(&mut out).expect("a parsed header must emit");
    m.emit(&mut out[MAD_HEADER_LEN..])
        .expect("a parsed message must emit");
    assert_eq!(MadHeader::parse(&out).unwrap(), h);
    assert_eq!(
        CmMessage::parse(
            h.attr_id,
            &out[MAD_HEADER_LEN..MAD_HEADER_LEN + MAD_DATA_LEN]
        )
        .unwrap(),
        m
    );
});
