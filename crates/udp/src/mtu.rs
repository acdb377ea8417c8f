//! The network interface that holds a port's address: its MTU, from which the port's
//! active MTU follows as Linux RoCE devices derive it, and its index (the GID table's
//! `ndev_ifindex`).

use oxrdma_core::Mtu;
use std::net::IpAddr;

/// Bytes a RoCEv2 packet carries besides its payload in the worst case: IPv6 header (40),
/// UDP (8), BTH (12), XRC ETH (4), AtomicETH (28), ICRC (4) — the same allowance rdma-core
/// devices subtract, so an interface MTU of 1500 gives 1024, 9000 gives 4096.
const OVERHEAD: u32 = 96;

/// The largest IB MTU whose packets fit in an interface MTU of `if_mtu` bytes.
pub fn active_mtu(if_mtu: u32) -> Mtu {
    let room = if_mtu.saturating_sub(OVERHEAD);
    [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
        .into_iter()
        .find(|m| m.bytes() as u32 <= room)
        .unwrap_or(Mtu::Mtu256)
}

/// The MTU of the interface that has address `ip`, if it can be found (any 127.x.y.z is
/// the loopback interface's, though only 127.0.0.1 is listed on it).
pub fn interface_mtu(ip: IpAddr) -> Option<u32> {
    let name = interface_name(ip)?;
    // Asked of the kernel (SIOCGIFMTU) rather than read from /sys, which shows the
    // interfaces of the namespace it was mounted in, not necessarily ours.
    let sock = std::net::UdpSocket::bind((ip, 0)).ok()?;
    // SAFETY: all-zero bytes are a valid ifreq.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, &b) in req.ifr_name.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name in `req` and writes an int into it;
    // `req` is a live, writable ifreq for the whole call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if rc != 0 {
        return None;
    }
    // SAFETY: after a successful SIOCGIFMTU the union holds the MTU.
    Some(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// The index of the interface that has address `ip`, if it can be found.
pub fn interface_index(ip: IpAddr) -> Option<u32> {
    let name = std::ffi::CString::new(interface_name(ip)?).ok()?;
    // SAFETY: `name` is a NUL-terminated string alive for the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// The interface holding `ip`; any loopback address is `lo`'s.
fn interface_name(ip: IpAddr) -> Option<String> {
    interface_of(ip).or_else(|| ip.is_loopback().then(|| "lo".to_string()))
}

/// The name of the interface listing `ip` (getifaddrs(3)).
fn interface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocates into `head`; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family tells its real type.
        let addr = unsafe { sockaddr_ip(ifa.ifa_addr) };
        if addr == Some(ip) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing borrowed outlives this.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The IP address in a sockaddr, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` must point to a valid sockaddr of the size its family implies.
pub(crate) unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: the caller guarantees `sa` is valid; the family selects the struct to read.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let a = &*sa.cast::<libc::sockaddr_in>();
                Some(IpAddr::from(a.sin_addr.s_addr.to_ne_bytes()))
            }
            libc::AF_INET6 => {
                let a = &*sa.cast::<libc::sockaddr_in6>();
                Some(IpAddr::from(a.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_follows_the_interface() {
        assert_eq!(active_mtu(1500), Mtu::Mtu1024);
        assert_eq!(active_mtu(9000), Mtu::Mtu4096);
        assert_eq!(active_mtu(65536), Mtu::Mtu4096);
        assert_eq!(active_mtu(4096 + 96), Mtu::Mtu4096);
        assert_eq!(active_mtu(4096 + 95), Mtu::Mtu2048);
        assert_eq!(active_mtu(1024 + 96), Mtu::Mtu1024);
        assert_eq!(active_mtu(576), Mtu::Mtu256);
        assert_eq!(active_mtu(0), Mtu::Mtu256);
    }

    #[test]
    fn loopback_is_found() {
        let lo = interface_mtu("127.0.0.1".parse().unwrap()).expect("lo has 127.0.0.1");
        assert!(lo >= 1280, "{lo}");
        assert_eq!(interface_mtu("127.0.0.9".parse().unwrap()), Some(lo));
        assert_eq!(interface_mtu("192.0.2.77".parse().unwrap()), None);
    }

    #[test]
    fn loopback_addresses_are_lo_s_index() {
        // SAFETY: a NUL-terminated literal.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        assert_ne!(lo, 0);
        for ip in ["127.0.0.1", "127.0.0.9", "::1"] {
            assert_eq!(interface_index(ip.parse().unwrap()), Some(lo), "{ip}");
        }
        assert_eq!(interface_index("192.0.2.77".parse().unwrap()), None);
    }
}
