//! Address and route resolution: which device address a connection's REQ goes to, and
//! the path the REQ describes (GIDs, flow label, hop limit, MTU).

use super::rendezvous;
use oxrdma_core::Gid;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Whether `ip` is an address of this host (so its CM ports are in the rendezvous).
pub(crate) fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The source address the host's routing picks for `dst`, if it has a route.
pub(crate) fn source_for(dst: IpAddr) -> Option<IpAddr> {
    let any = match dst {
        IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        IpAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(dst, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// Why a device on `own` cannot reach `dst`, as the errno the kernel's CM gives with its
/// address error: ENETUNREACH where the host has no route to it, ENODEV where the route
/// leaves by an interface the device is not on (a device on a loopback address reaches
/// only this host: the kernel keeps loopback sources off the wire, and its packets would
/// vanish without a word). None: reachable, as far as the host can tell.
pub(crate) fn unreachable(own: IpAddr, dst: IpAddr) -> Option<i32> {
    if is_local(dst) {
        return None;
    }
    let Some(src) = source_for(dst) else {
        return Some(rustix::io::Errno::NETUNREACH.raw_os_error());
    };
    (own.is_loopback() && !src.is_loopback()).then_some(rustix::io::Errno::NODEV.raw_os_error())
}

/// Whether a listener bound to `bound` (None: any address) takes connections to `dst`.
/// Every loopback address is one host: with nothing configured the devices sit on
/// 127.0.0.2, 127.0.0.3, …, and a program listening on its device's address or on
/// 127.0.0.1 is found by one connecting to either.
pub(crate) fn takes(bound: Option<IpAddr>, dst: IpAddr) -> bool {
    match bound {
        None => true,
        Some(b) if b.is_unspecified() => true,
        Some(b) => b == dst || (b.is_loopback() && dst.is_loopback()),
    }
}

/// Where the REQ for `dst` (a port of `port_space`) goes: the device of the local
/// listener on that port if `dst` is this host's, else `dst` itself. None: `dst` is this
/// host's and nobody here listens there (`own` answers it: REJ "invalid service ID").
///
/// A listener of this host that is not there yet is waited for, briefly (`LISTEN_GRACE`):
/// programs such as perftest stop listening after their first connection and listen again
/// for the next, and count on the peer's address and route resolution (which takes the
/// kernel some hundreds of microseconds) to outlast the gap. Ours takes microseconds.
pub(crate) fn target(port_space: u16, dst: SocketAddr, own: Gid) -> Gid {
    if !is_local(dst.ip()) {
        return Gid::from(dst.ip());
    }
    let deadline = Instant::now() + LISTEN_GRACE;
    loop {
        match rendezvous::lookup(port_space, dst.port()) {
            Some(e) if takes(e.bound, dst.ip()) => return Gid::from(e.device),
            // Our own CM has no listener there either, and answers as a peer's would.
            _ if Instant::now() >= deadline => return own,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// How long a connection to this host waits for a listener to appear.
const LISTEN_GRACE: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_bindable_addresses_are_local() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("127.3.2.1".parse().unwrap()));
        assert!(is_local("::1".parse().unwrap()));
        // TEST-NET-3 (RFC 5737) is on no host.
        assert!(!is_local("203.0.113.7".parse().unwrap()));
    }

    #[test]
    fn a_loopback_device_reaches_this_host_only() {
        let lo: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(unreachable(lo, "127.0.0.9".parse().unwrap()), None);
        // Off this host: an error at once (which one depends on the host's routes; no
        // packet is sent to find out).
        let far = unreachable(lo, "203.0.113.7".parse().unwrap());
        let (nodev, unreach) = (
            rustix::io::Errno::NODEV.raw_os_error(),
            rustix::io::Errno::NETUNREACH.raw_os_error(),
        );
        assert!(far == Some(nodev) || far == Some(unreach), "{far:?}");
    }

    #[test]
    fn listeners_take_their_address_any_address_or_any_loopback() {
        let lo1 = "127.0.0.1".parse().unwrap();
        let lo5: IpAddr = "127.0.0.5".parse().unwrap();
        let other: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(takes(None, other));
        assert!(takes(Some("0.0.0.0".parse().unwrap()), other));
        assert!(takes(Some(lo5), lo1));
        assert!(takes(Some(other), other));
        assert!(!takes(Some(other), lo1));
        assert!(!takes(Some(lo5), other));
    }
}
