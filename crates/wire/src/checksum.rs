//! The Internet checksum (RFC 1071) that IPv4 headers and UDP carry. RoCEv2 itself relies
//! on the ICRC; these are for the headers around it (a GRH, a capture, a test's raw packet).

/// Adds `bytes`, as big-endian 16-bit words (an odd last byte padded with zero), to the
/// running one's-complement sum `acc`.
pub fn sum(mut acc: u32, bytes: &[u8]) -> u32 {
    for w in bytes.chunks(2) {
        acc += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    acc
}

/// Folds a running sum into the 16-bit checksum (its one's complement).
pub fn finish(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Fills in the header checksum of the IPv4 header at the start of `h` (20 bytes, no
/// options).
pub fn fill_ipv4(h: &mut [u8]) {
    h[10..12].fill(0);
    let c = finish(sum(0, &h[..20]));
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The UDP checksum of `udp` (header and payload, its checksum field taken as zero) from
/// `src` to `dst` (4 or 16 bytes each: the pseudo-header's addresses). Zero means "none"
/// in UDP, so a computed zero is returned as all ones.
pub fn udp(src: &[u8], dst: &[u8], udp: &[u8]) -> u16 {
    let len = udp.len() as u32;
    let mut acc = sum(sum(0, src), dst) + 17 + (len >> 16) + (len & 0xffff);
    acc = sum(acc, &udp[..6]);
    acc = sum(acc, &udp[8..]);
    match finish(acc) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example_and_verification() {
        // RFC 1071's example words sum to 0xddf2; the checksum is its complement.
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(0, &b)), !0xddf2);
        let mut h = crate::icrc::ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 7, 1, 2, 5);
        fill_ipv4(&mut h);
        assert_eq!(
            finish(sum(0, &h[..20])),
            0,
            "a filled header sums to all ones"
        );
    }

    #[test]
    fn udp_checksum_verifies_over_the_pseudo_header() {
        let mut d = crate::icrc::ipv6_udp_header([0xfd; 16], [1; 16], 49152, 4791, 3).to_vec();
        d.extend_from_slice(&[9, 8, 7]);
        let c = udp(&d[8..24], &d[24..40], &d[40..]);
        d[46..48].copy_from_slice(&c.to_be_bytes());
        let len = (d.len() - 40) as u32;
        let acc = sum(sum(sum(0, &d[8..24]), &d[24..40]), &d[40..]) + 17 + len;
        assert_eq!(finish(acc), 0);
    }
}
