//! The 40-byte GRH area every UD receive buffer starts with: the IPv6 header of the
//! datagram, or for IPv4 twenty zero bytes and then the IPv4 header.

use crate::gid::Gid;
use oxrdma_wire::{checksum, icrc};
use std::net::IpAddr;

/// Bytes of the GRH area in front of every UD receive.
pub const GRH_LEN: usize = 40;

/// The GRH area of a datagram from `src` to `dst` whose UDP payload (BTH to ICRC) is
/// `udp_payload` bytes, as RoCEv2 devices fill it: the IPv6 header, or for IPv4 twenty zero
/// bytes and then the IPv4 header (TTL, ID and TOS are not seen in user space: 64, 0, 0).
pub(crate) fn grh(src: Gid, dst: Gid, udp_payload: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = icrc::ipv4_udp_header(s.octets(), d.octets(), 0, 0, 0, udp_payload);
            g[20..].copy_from_slice(&h[..20]);
            checksum::fill_ipv4(&mut g[20..]);
        }
        _ => {
            let h = icrc::ipv6_udp_header(src.0, dst.0, 0, 0, udp_payload);
            g.copy_from_slice(&h[..GRH_LEN]);
        }
    }
    g
}
