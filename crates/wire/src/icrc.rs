//! The invariant CRC of RoCEv2 (IBTA Annex A17).
//!
//! CRC-32 (the Ethernet/zlib polynomial, initial value and final XOR all ones) over: 8 bytes
//! of ones standing in for the InfiniBand LRH; the IP header with the fields routers change
//! masked to ones (IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label and hop
//! limit); the UDP header with its checksum masked to ones; the BTH with byte 4 (FECN, BECN,
//! reserved) masked to ones; and the rest of the packet up to the ICRC. The ICRC is stored
//! least significant byte first. The IPv4 Identification field is *not* masked.

use crate::error::{need, Result, WireError};

/// Bytes of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

const UDP_LEN: usize = 8;
const BTH_LEN: usize = crate::bth::Bth::<&[u8]>::LEN;
const IPV6_LEN: usize = 40;
const IP_PROTO_UDP: u8 = 17;
/// Largest IPv4 header (15 words) + UDP.
pub(crate) const MAX_IP_UDP: usize = 60 + UDP_LEN;
/// The ones standing in for the LRH.
pub(crate) const LRH_ONES: usize = 8;
/// Bytes after the BTH copied next to the headers rather than hashed where they are.
const SHORT_REST: usize = 64;

/// A fresh CRC-32 state. `crc32fast::Hasher::new` looks up the CPU's features at every
/// call (a sixth of a 40-byte packet's ICRC); a clone of one made once does not.
pub(crate) fn hasher() -> crc32fast::Hasher {
    static FIRST: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    FIRST.get_or_init(crc32fast::Hasher::new).clone()
}

/// Copies `ip_udp` (an IPv4 or IPv6 header immediately followed by a UDP header) into `out`
/// with the variant fields set to ones; returns the length used.
pub(crate) fn masked_ip_udp(ip_udp: &[u8], out: &mut [u8]) -> Result<usize> {
    need("IP header", ip_udp, 1)?;
    let ip_len = match ip_udp[0] >> 4 {
        4 => {
            let ihl = usize::from(ip_udp[0] & 0xf) * 4;
            if ihl < 20 {
                return Err(WireError::BadIpHeader("IPv4 header length below 20"));
            }
            need("IPv4+UDP header", ip_udp, ihl + UDP_LEN)?;
            if ip_udp[9] != IP_PROTO_UDP {
                return Err(WireError::BadIpHeader("IPv4 protocol is not UDP"));
            }
            ihl
        }
        6 => {
            need("IPv6+UDP header", ip_udp, IPV6_LEN + UDP_LEN)?;
            if ip_udp[6] != IP_PROTO_UDP {
                return Err(WireError::BadIpHeader("IPv6 next header is not UDP"));
            }
            IPV6_LEN
        }
        _ => return Err(WireError::BadIpHeader("IP version is neither 4 nor 6")),
    };
    let len = ip_len + UDP_LEN;
    if ip_udp.len() != len {
        return Err(WireError::BadIpHeader("bytes follow the UDP header"));
    }
    out[..len].copy_from_slice(ip_udp);
    if ip_len == IPV6_LEN {
        out[0] |= 0x0f; // traffic class (high nibble)
        out[1..4].fill(0xff); // traffic class (low nibble) + flow label
        out[7] = 0xff; // hop limit
    } else {
        out[1] = 0xff; // TOS
        out[8] = 0xff; // TTL
        out[10..12].fill(0xff); // header checksum
    }
    out[ip_len + 6..ip_len + 8].fill(0xff); // UDP checksum
    Ok(len)
}

/// The ICRC of a transport packet. `ip_udp` is the IP header followed by the UDP header;
/// `transport` is the UDP payload *without* its trailing ICRC.
pub fn compute(ip_udp: &[u8], transport: &[u8]) -> Result<u32> {
    need("BTH", transport, BTH_LEN)?;
    // Everything up to the BTH's end (and a short packet's rest) in one buffer, hashed in
    // one call: crc32fast takes fewer than 16 bytes a byte at a time, and hashing the
    // fields one call each cost twice what the CRC of an 8 B SEND needs.
    let mut buf = [0xffu8; LRH_ONES + MAX_IP_UDP + BTH_LEN + SHORT_REST];
    let n = masked_ip_udp(ip_udp, &mut buf[LRH_ONES..LRH_ONES + MAX_IP_UDP])?;
    let at = LRH_ONES + n;
    buf[at..at + BTH_LEN].copy_from_slice(&transport[..BTH_LEN]);
    buf[at + 4] = 0xff;
    let rest = &transport[BTH_LEN..];
    let mut h = hasher();
    if rest.len() <= SHORT_REST {
        let end = at + BTH_LEN + rest.len();
        buf[at + BTH_LEN..end].copy_from_slice(rest);
        h.update(&buf[..end]);
    } else {
        h.update(&buf[..at + BTH_LEN]);
        h.update(rest);
    }
    Ok(h.finalize())
}

/// The ICRC a packet carries (its last four bytes, least significant first).
pub fn carried(udp_payload: &[u8]) -> Result<u32> {
    need("ICRC", udp_payload, BTH_LEN + ICRC_LEN)?;
    let t = &udp_payload[udp_payload.len() - ICRC_LEN..];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Checks the ICRC of `udp_payload` (BTH through ICRC) against the given IP and UDP headers.
pub fn verify(ip_udp: &[u8], udp_payload: &[u8]) -> Result<()> {
    let carried = carried(udp_payload)?;
    let computed = compute(ip_udp, &udp_payload[..udp_payload.len() - ICRC_LEN])?;
    if computed == carried {
        Ok(())
    } else {
        Err(WireError::IcrcMismatch { computed, carried })
    }
}

/// Computes the ICRC of `udp_payload` (BTH through ICRC) and writes it into its last 4 bytes.
pub fn fill(ip_udp: &[u8], udp_payload: &mut [u8]) -> Result<u32> {
    need("ICRC", udp_payload, BTH_LEN + ICRC_LEN)?;
    let end = udp_payload.len() - ICRC_LEN;
    let crc = compute(ip_udp, &udp_payload[..end])?;
    udp_payload[end..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

/// The IPv4 and UDP headers a sender's kernel will put in front of `udp_payload_len` bytes,
/// as far as the ICRC can see them (TOS, TTL, checksums are masked anyway). DF is set, as
/// Linux rxe does. Use it to compute the ICRC of a packet sent through a UDP socket.
pub fn ipv4_udp_header(
    src: [u8; 4],
    dst: [u8; 4],
    identification: u16,
    src_port: u16,
    dst_port: u16,
    udp_payload_len: usize,
) -> [u8; 28] {
    let udp_len = (UDP_LEN + udp_payload_len) as u16;
    let total = 20 + udp_len;
    let mut h = [0u8; 28];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&identification.to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = 64;
    h[9] = IP_PROTO_UDP;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    udp_header(&mut h[20..], src_port, dst_port, udp_len);
    h
}

/// The IPv6 and UDP headers in front of `udp_payload_len` bytes (see [`ipv4_udp_header`]).
pub fn ipv6_udp_header(
    src: [u8; 16],
    dst: [u8; 16],
    src_port: u16,
    dst_port: u16,
    udp_payload_len: usize,
) -> [u8; 48] {
    let udp_len = (UDP_LEN + udp_payload_len) as u16;
    let mut h = [0u8; 48];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h[6] = IP_PROTO_UDP;
    h[7] = 64;
    h[8..24].copy_from_slice(&src);
    h[24..40].copy_from_slice(&dst);
    udp_header(&mut h[40..], src_port, dst_port, udp_len);
    h
}

fn udp_header(h: &mut [u8], src_port: u16, dst_port: u16, udp_len: u16) {
    h[0..2].copy_from_slice(&src_port.to_be_bytes());
    h[2..4].copy_from_slice(&dst_port.to_be_bytes());
    h[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h[6..8].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ([u8; 28], [u8; 16]) {
        let mut pkt = [0u8; 16];
        pkt[0] = 0x11; // RC ACK
        pkt[2..4].fill(0xff);
        let hdr = ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 7, 49152, 4791, pkt.len());
        (hdr, pkt)
    }

    #[test]
    fn fill_then_verify() {
        let (hdr, mut pkt) = sample();
        fill(&hdr, &mut pkt).unwrap();
        verify(&hdr, &pkt).unwrap();
    }

    #[test]
    fn masked_fields_do_not_matter_and_others_do() {
        let (hdr, mut pkt) = sample();
        fill(&hdr, &mut pkt).unwrap();
        let mut h2 = hdr;
        h2[1] = 0x2e; // TOS
        h2[8] = 3; // TTL
        h2[10] = 0x12; // IP checksum
        h2[26] = 0x55; // UDP checksum
        verify(&h2, &pkt).unwrap();
        let mut p2 = pkt;
        p2[4] = 0xc0; // FECN/BECN
        verify(&h2, &p2).unwrap();
        let mut h3 = hdr;
        h3[5] ^= 1; // IPv4 Identification is covered
        assert!(matches!(
            verify(&h3, &pkt),
            Err(WireError::IcrcMismatch { .. })
        ));
        let mut p3 = pkt;
        p3[8] ^= 0x80; // AckReq is covered
        assert!(matches!(
            verify(&hdr, &p3),
            Err(WireError::IcrcMismatch { .. })
        ));
    }

    #[test]
    fn bad_ip_headers_are_named() {
        let (mut hdr, pkt) = sample();
        assert!(matches!(
            verify(&hdr[..27], &pkt),
            Err(WireError::Truncated { .. })
        ));
        hdr[9] = 6;
        assert_eq!(
            verify(&hdr, &pkt),
            Err(WireError::BadIpHeader("IPv4 protocol is not UDP"))
        );
        hdr[0] = 0x55;
        assert!(matches!(verify(&hdr, &pkt), Err(WireError::BadIpHeader(_))));
        assert!(matches!(
            verify(&[], &pkt),
            Err(WireError::Truncated { .. })
        ));
    }
}
