//! The host's network interfaces, and the GID table a RoCE device on one of them has, in
//! Linux rxe's order: so that `ibv_rc_pingpong -g N`, perftest's `-x N` and a listing of
//! the GIDs mean on oxrdma what they mean on `rdma link add rxe0 type rxe netdev IF`.
//!
//! rxe's table (the kernel's RoCE GID cache, RoCE v2 entries only): index 0 is the
//! interface's default GID, the link-local address made from its MAC address (EUI-64);
//! then its IPv4 addresses (as `::ffff:a.b.c.d`), then its IPv6 addresses but the default
//! one. The captures' guests show `fe80::…`, `::ffff:10.77.0.x`, `fd77::x` as 0, 1, 2.

use oxrdma_core::Gid;
use std::net::IpAddr;

/// One network interface as getifaddrs(3) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    /// Its hardware address, if it has an Ethernet-like one.
    pub mac: Option<[u8; 6]>,
    pub up: bool,
    pub loopback: bool,
    /// Its IP addresses, as listed.
    pub addrs: Vec<IpAddr>,
}

impl Interface {
    /// The GID table of a RoCE device on this interface, in rxe's order.
    pub fn gid_table(&self) -> Vec<Gid> {
        gid_table(self.mac, &self.addrs)
    }
}

/// The default GID of an interface with hardware address `mac`: `fe80::` and the
/// modified EUI-64 interface identifier (RFC 4291: `ff:fe` in the middle, the
/// universal/local bit flipped), as the kernel's IPv6 link-local address and rxe's GID 0.
pub fn default_gid(mac: [u8; 6]) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..11].copy_from_slice(&[mac[0] ^ 0x02, mac[1], mac[2]]);
    g[11] = 0xff;
    g[12] = 0xfe;
    g[13..].copy_from_slice(&mac[3..]);
    Gid(g)
}

/// A table in rxe's order from an interface's MAC address and IP addresses.
pub fn gid_table(mac: Option<[u8; 6]>, addrs: &[IpAddr]) -> Vec<Gid> {
    let mut table: Vec<Gid> = mac.map(default_gid).into_iter().collect();
    let v4 = addrs.iter().filter(|a| a.is_ipv4());
    let v6 = addrs.iter().filter(|a| a.is_ipv6());
    for a in v4.chain(v6) {
        let g = Gid::from(*a);
        if !table.contains(&g) {
            table.push(g);
        }
    }
    table
}

/// Whether `ip` is an IPv6 link-local address (`fe80::/10`): it needs its interface's
/// index to be sent to or bound.
pub fn is_link_local(ip: IpAddr) -> bool {
    Gid::from(ip).is_link_local()
}

/// The interfaces of this process's network namespace, by index.
pub fn interfaces() -> Vec<Interface> {
    let mut list: Vec<Interface> = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocates into `head`; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return list;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let at = match list.iter().position(|i| i.name == name) {
            Some(at) => at,
            None => {
                list.push(Interface {
                    index: index_of(&name),
                    name,
                    mac: None,
                    up: ifa.ifa_flags & libc::IFF_UP as u32 != 0,
                    loopback: ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0,
                    addrs: Vec::new(),
                });
                list.len() - 1
            }
        };
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family tells its type.
        if let Some(ip) = unsafe { crate::mtu::sockaddr_ip(ifa.ifa_addr) } {
            list[at].addrs.push(ip);
        // SAFETY: as above; the family is read from the sockaddr itself.
        } else if let Some(mac) = unsafe { hardware_address(ifa.ifa_addr) } {
            list[at].mac = Some(mac);
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing borrowed outlives this.
    unsafe { libc::freeifaddrs(head) };
    list.sort_by_key(|i| i.index);
    list
}

fn index_of(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a NUL-terminated string alive for the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// An Ethernet address in an `AF_PACKET` sockaddr (not all zero: loopback's is).
///
/// # Safety
/// `sa` must point to a valid sockaddr of the size its family implies.
unsafe fn hardware_address(sa: *const libc::sockaddr) -> Option<[u8; 6]> {
    // SAFETY: the caller guarantees `sa` is valid; the family selects the struct to read.
    let ll = unsafe {
        if i32::from((*sa).sa_family) != libc::AF_PACKET {
            return None;
        }
        &*sa.cast::<libc::sockaddr_ll>()
    };
    let mac: [u8; 6] = ll.sll_addr[..6].try_into().ok()?;
    (ll.sll_halen == 6 && mac != [0; 6]).then_some(mac)
}

/// The MTU of the interface holding `ip` (`mtu.rs`).
pub fn interface_mtu(ip: IpAddr) -> Option<u32> {
    crate::mtu::interface_mtu(ip)
}

/// The interface named `name`, if this namespace has it.
pub fn interface(name: &str) -> Option<Interface> {
    interfaces().into_iter().find(|i| i.name == name)
}

/// The interface that lists `ip` (any 127.x.y.z is loopback's).
pub fn interface_with(ip: IpAddr) -> Option<Interface> {
    let list = interfaces();
    let found = list.iter().position(|i| i.addrs.contains(&ip));
    let found = found.or_else(|| {
        ip.is_loopback()
            .then(|| list.iter().position(|i| i.loopback))
            .flatten()
    });
    found.map(|at| list[at].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_gid_is_the_eui64_link_local_address() {
        // The captures' guest A: MAC 52:54:00:77:00:01, GID 0 fe80::5054:ff:fe77:1.
        let g = default_gid([0x52, 0x54, 0x00, 0x77, 0x00, 0x01]);
        assert_eq!(g.to_string(), "fe80::5054:ff:fe77:1");
        // This machine kind's eth0: 02:fc:00:00:00:01 has fe80::fc:ff:fe00:1.
        let g = default_gid([0x02, 0xfc, 0, 0, 0, 1]);
        assert_eq!(g.to_string(), "fe80::fc:ff:fe00:1");
    }

    #[test]
    fn the_table_is_in_rxe_order() {
        let mac = [0x52, 0x54, 0x00, 0x77, 0x00, 0x01];
        let addrs: Vec<IpAddr> = ["fd77::1", "fe80::5054:ff:fe77:1", "10.77.0.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let t: Vec<String> = gid_table(Some(mac), &addrs)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(t, ["fe80::5054:ff:fe77:1", "::ffff:10.77.0.1", "fd77::1"]);
        // No MAC (a tunnel, loopback): the addresses alone, IPv4 first.
        let t = gid_table(None, &addrs[..1]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn loopback_is_listed_with_its_address() {
        let lo = interfaces().into_iter().find(|i| i.loopback).expect("lo");
        assert!(lo.addrs.contains(&"127.0.0.1".parse().unwrap()), "{lo:?}");
        assert!(lo.index > 0 && lo.mac.is_none());
        assert_eq!(interface_with("127.0.0.9".parse().unwrap()), Some(lo));
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(!is_link_local("fd00::1".parse().unwrap()));
    }
}
