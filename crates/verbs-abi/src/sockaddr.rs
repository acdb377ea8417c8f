//! C socket addresses (`sockaddr_in`, `sockaddr_in6`) to and from Rust's, for librdmacm's
//! calls and structs (the C library's, and the API's rdma-core backend's).

use crate::cm::sockaddr_storage;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The address `sa` points to; None for NULL or a family other than IPv4 and IPv6.
///
/// # Safety
/// `sa` is NULL or points to a socket address of its family's size.
pub unsafe fn read(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller's promise.
    let family = c_int_family(unsafe { sa.as_ref() }?);
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn c_int_family(sa: &libc::sockaddr) -> i32 {
    i32::from(sa.sa_family)
}

/// `a` as a C socket address in `out` (zeroed first).
pub fn write(out: &mut sockaddr_storage, a: SocketAddr) {
    out.bytes = [0; 128];
    let p = out.bytes.as_mut_ptr();
    match a {
        SocketAddr::V4(v4) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: the storage has 128 bytes, 8-aligned; a sockaddr_in fits.
            unsafe { p.cast::<libc::sockaddr_in>().write(s) };
        }
        SocketAddr::V6(v6) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: the storage has 128 bytes, 8-aligned; a sockaddr_in6 fits.
            unsafe { p.cast::<libc::sockaddr_in6>().write(s) };
        }
    }
}

/// The length of a C socket address of `a`'s family.
pub fn len_of(a: &SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>() as u32,
        SocketAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>() as u32,
    }
}

/// The port of the address in `s` (network order), 0 if it holds none.
pub fn port_be(s: &sockaddr_storage) -> u16 {
    // SAFETY: the storage is a valid (possibly zero) socket address.
    unsafe { read(s.bytes.as_ptr().cast()) }.map_or(0, |a| a.port().to_be())
}
