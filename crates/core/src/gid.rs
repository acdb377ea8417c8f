//! Global identifiers: for RoCEv2 a GID is the IP address (IPv4 as `::ffff:a.b.c.d`).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 16-byte GID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether it is an IPv6 link-local address (`fe80::/10`): it means nothing without
    /// its interface.
    pub fn is_link_local(self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }

    /// The IP address this GID stands for (IPv4-mapped GIDs give IPv4).
    pub fn ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        IpAddr::V4(ip).into()
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

/// A device's main GID in its table: the first IPv4 one, else the first that is not
/// link-local, else the first (what perftest picks unasked, and what the RDMA CM's
/// connections come from when no address is asked for).
pub fn main_gid(table: &[Gid]) -> Gid {
    let first = table.iter().find(|g| g.ip().is_ipv4());
    let first = first.or_else(|| table.iter().find(|g| !g.is_link_local()));
    first.or(table.first()).copied().unwrap_or_default()
}

/// The UDP source port Linux rxe uses for an RC/UC QP connected to `rqpn` (kernel
/// `rdma_get_udp_sport` of the flow label `rdma_calc_flow_label(lqpn, rqpn)`). Symmetric, so
/// both ends pick the same port.
pub fn rc_udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    let fl_low = fl & 0x3fff;
    let fl_high = fl & 0xfc000;
    (0xc000 | ((fl_low ^ (fl_high >> 14)) & 0x3fff)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_sport_matches_the_captures() {
        assert_eq!(rc_udp_sport(0x11, 0x11), 49441);
        assert_eq!(rc_udp_sport(0x22, 0x22), 50308);
        assert_eq!(rc_udp_sport(0x21, 0x21), 50241);
    }

    #[test]
    fn the_main_gid_is_ipv4_then_global() {
        let g = |s: &str| Gid::from(s.parse::<IpAddr>().unwrap());
        let (ll, v4, v6) = (g("fe80::1"), g("10.0.0.1"), g("fd00::1"));
        assert_eq!(main_gid(&[ll, v4, v6]), v4);
        assert_eq!(main_gid(&[ll, v6]), v6);
        assert_eq!(main_gid(&[ll]), ll);
        assert_eq!(main_gid(&[]), Gid::default());
    }

    #[test]
    fn ipv4_mapped() {
        let g = Gid::from(Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(g.to_string(), "::ffff:10.77.0.1");
        assert_eq!(g.ip(), IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)));
    }
}
