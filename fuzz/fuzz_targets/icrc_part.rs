//! The ICRC taken in two halves, the transport part in one pass with the copy out of a
//! memory region (`SharedBuffer::read_hashing`, the fused loop where the CPU has it), must
//! copy exactly and give the ICRC the whole packet gives, for any bytes, offset, length,
//! starting hash, IP version, IPv4 ID and source port.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::memory::SharedBuffer;
use oxrdma_wire::icrc::{self, ICRC_LEN};
use oxrdma_wire::icrc_part;

fuzz_target!(|data: &[u8]| {
    let Some((head, bytes)) = data.split_first_chunk::<8>() else {
        return;
    };
    let hash = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let id = u16::from_le_bytes([head[4], head[5]]);
    let (skip, v6) = (usize::from(head[6] % 64).min(bytes.len()), head[7] & 1 == 1);
    // The copy that hashes, against a plain read and crc32fast.
    let region = SharedBuffer::new(bytes.len()).expect("a small buffer");
    assert!(region.write(0, bytes));
    let mut out = vec![0u8; bytes.len() - skip];
    let got = region.read_hashing(skip, &mut out, hash).expect("in bounds");
    assert_eq!(out, bytes[skip..]);
    assert_eq!(got, icrc_part::hash_more(hash, &bytes[skip..]));
    // The two halves against the whole, on these bytes as a packet (BTH on).
    if bytes.len() < 12 {
        return;
    }
    let mut packet = bytes.to_vec();
    packet.extend_from_slice(&[0; ICRC_LEN]);
    let hdr: Vec<u8> = if v6 {
        icrc::ipv6_udp_header([0xfd; 16], [0xfe; 16], id, 4791, packet.len()).to_vec()
    } else {
        icrc::ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], id, 49152, 4791, packet.len()).to_vec()
    };
    let part = icrc_part::part_start(&bytes[..12]);
    let mut copy = vec![0u8; bytes.len() - 12];
    let part = region.read_hashing(12, &mut copy, part).expect("in bounds");
    let end = packet.len() - ICRC_LEN;
    packet[end..].copy_from_slice(&icrc_part::part_end(part).to_le_bytes());
    let sealed = icrc_part::complete(&hdr, &mut packet).expect("good headers");
    assert_eq!(sealed, icrc::compute(&hdr, bytes).expect("good headers"));
});
