//! Making, connecting, accepting and ending rsockets, and their names.

use super::{errno, insert, remove, with, Kind, Opts, Sock};
use crate::cm::devices::device_for;
use crate::cm::sockaddr;
use oxrdma::cm::EventChannel;
use oxrdma::rsocket::{RListener, RStream};
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The oxrdma context of the device for `ip` (the first device for none or a wildcard).
fn context_for(ip: Option<IpAddr>) -> Result<oxrdma::Context, c_int> {
    let dev = device_for(ip.filter(|ip| !ip.is_unspecified()))?;
    // SAFETY: `dev.verbs()` is open for the process's life.
    let ctx = unsafe { crate::context::Context::from_ibv(dev.verbs()) }.ok_or(libc::ENODEV)?;
    Ok(ctx.ox.clone())
}

/// `rsocket`: stream sockets of IPv4 and IPv6 only.
pub(crate) extern "C" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    let stream = ty == libc::SOCK_STREAM && (protocol == 0 || protocol == libc::IPPROTO_TCP);
    if !matches!(domain, libc::AF_INET | libc::AF_INET6) || !stream {
        crate::errno::set_errno(libc::ENOTSUP);
        return -1;
    }
    if !crate::cm::devices::any() {
        crate::errno::set_errno(libc::ENODEV);
        return -1;
    }
    match EventChannel::new_engine() {
        Ok(ch) => insert(ch, domain, Kind::Fresh, Opts::default()),
        Err(_) => {
            crate::errno::set_errno(libc::ENOMEM);
            -1
        }
    }
}

/// The socket address at `addr` (`len` bytes), of the socket's family.
///
/// # Safety
/// `addr` NULL or readable for `len` bytes.
unsafe fn read_addr(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<SocketAddr, c_int> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise; the family says how much `read` reads, checked next.
    let a = unsafe { sockaddr::read(addr) }.ok_or(libc::EAFNOSUPPORT)?;
    if a.is_ipv6() && (len as usize) < std::mem::size_of::<libc::sockaddr_in6>() {
        return Err(libc::EINVAL);
    }
    Ok(a)
}

/// # Safety
/// `addr` NULL or readable for `len` bytes.
pub(crate) unsafe extern "C" fn rbind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's promise.
    let a = unsafe { read_addr(addr, len) };
    with(fd, |s| {
        let a = a?;
        if !matches!(s.kind(), Kind::Fresh) || s.opts().bound.is_some() {
            return Err(libc::EINVAL);
        }
        s.opts().bound = Some(a);
        Ok(0)
    })
}

/// Where a listener with no address listens: any address of its family.
fn wildcard(s: &Sock) -> SocketAddr {
    let ip = if s.domain == libc::AF_INET6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    SocketAddr::new(ip, 0)
}

pub(crate) extern "C" fn rlisten(fd: c_int, backlog: c_int) -> c_int {
    with(fd, |s| {
        match s.kind() {
            Kind::Listening(_) => return Ok(0),
            Kind::Fresh => {}
            _ => return Err(libc::EINVAL),
        }
        let addr = s.opts().bound.unwrap_or_else(|| wildcard(s));
        let ctx = context_for(Some(addr.ip()))?;
        let backlog = if backlog > 0 { backlog as usize } else { 1024 };
        let l = RListener::listen(&s.ch, &ctx, addr, backlog).map_err(|e| errno(&e))?;
        s.set_kind(Kind::Listening(Arc::new(l)));
        Ok(0)
    })
}

/// # Safety
/// `addr` NULL, or writable for `*len` bytes with `len` writable.
pub(crate) unsafe extern "C" fn raccept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    with(fd, |s| {
        let Kind::Listening(l) = s.kind() else {
            return Err(libc::EINVAL);
        };
        // Accepted connections take the sizes set on the listener (before or after
        // `rlisten`, as rsockets allows).
        let rs = s.opts().rs;
        let stream = l.accept_with(s.nonblocking(), &rs).map_err(|e| errno(&e))?;
        let peer = stream.peer_addr();
        let opts = Opts {
            rs,
            ..Opts::default()
        };
        let ch = stream.channel().clone();
        let new = insert(ch, s.domain, Kind::Stream(Arc::new(stream)), opts);
        if let Some(p) = peer {
            // SAFETY: the caller's promise.
            unsafe { write_addr(p, addr, len) };
        }
        Ok(new)
    })
}

/// # Safety
/// `addr` NULL or readable for `len` bytes.
pub(crate) unsafe extern "C" fn rconnect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's promise.
    let a = unsafe { read_addr(addr, len) };
    with(fd, |s| match s.kind() {
        Kind::Fresh => {
            let dst = a?;
            let (src, o) = {
                let o = s.opts();
                (o.bound, o.rs)
            };
            let ctx = context_for(src.map(|a| a.ip()))?;
            let nonblock = s.nonblocking();
            match RStream::connect_with(&s.ch, &ctx, src, dst, &o, nonblock) {
                Ok(st) => {
                    let connecting = st.is_connecting();
                    s.set_kind(Kind::Stream(Arc::new(st)));
                    if connecting {
                        Err(libc::EINPROGRESS)
                    } else {
                        Ok(0)
                    }
                }
                Err(e) => {
                    s.set_kind(Kind::Failed(errno(&e)));
                    Err(errno(&e))
                }
            }
        }
        Kind::Stream(st) => match st.finish_connect(s.nonblocking()) {
            Ok(()) => Ok(0),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(libc::EALREADY),
            Err(e) => Err(errno(&e)),
        },
        Kind::Listening(_) => Err(libc::EINVAL),
        Kind::Failed(_) => Err(libc::ENOTCONN),
    })
}

pub(crate) extern "C" fn rshutdown(fd: c_int, how: c_int) -> c_int {
    with(fd, |s| {
        let (read, write) = match how {
            libc::SHUT_RD => (true, false),
            libc::SHUT_WR => (false, true),
            libc::SHUT_RDWR => (true, true),
            _ => return Err(libc::EINVAL),
        };
        match s.kind() {
            Kind::Stream(st) => st.shutdown(read, write).map(|()| 0).map_err(|e| errno(&e)),
            Kind::Fresh => Err(libc::ENOTCONN),
            _ => Ok(0),
        }
    })
}

/// `rclose`: the connection is shut down and disconnected as it goes.
pub(crate) extern "C" fn rclose(fd: c_int) -> c_int {
    match remove(fd) {
        // The last holder of the stream (a thread may still be in a call) ends it.
        Some(_) => 0,
        None => {
            crate::errno::set_errno(libc::EBADF);
            -1
        }
    }
}

/// Writes `a` to a caller's `sockaddr` of `*len` bytes (cut to fit, as the kernel does)
/// and sets `*len` to its full size.
///
/// # Safety
/// `addr` NULL, or writable for `*len` bytes with `len` writable.
pub(crate) unsafe fn write_addr(
    a: SocketAddr,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let mut st = crate::cm::abi::sockaddr_storage { bytes: [0; 128] };
    sockaddr::write(&mut st, a);
    let full = sockaddr::len_of(&a);
    // SAFETY: the caller's promise.
    unsafe {
        let n = (*len).min(full) as usize;
        std::ptr::copy_nonoverlapping(st.bytes.as_ptr(), addr.cast::<u8>(), n);
        *len = full;
    }
}

/// # Safety
/// As `write_addr`.
pub(crate) unsafe extern "C" fn rgetpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    with(fd, |s| {
        let a = s.stream()?.peer_addr().ok_or(libc::ENOTCONN)?;
        // SAFETY: the caller's promise.
        unsafe { write_addr(a, addr, len) };
        Ok(0)
    })
}

/// # Safety
/// As `write_addr`.
pub(crate) unsafe extern "C" fn rgetsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    with(fd, |s| {
        let a = match s.kind() {
            Kind::Stream(st) => st.local_addr(),
            Kind::Listening(l) => l.local_addr(),
            _ => s.opts().bound,
        };
        let a = a.unwrap_or_else(|| wildcard(s));
        // SAFETY: the caller's promise.
        unsafe { write_addr(a, addr, len) };
        Ok(0)
    })
}
