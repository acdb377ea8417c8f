//! `rsetsockopt`, `rgetsockopt`, `rfcntl`: the options rsockets knows, as it answers them.

use super::{with, Kind, Sock};
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
/// Queue sizes rsockets allows.
const QP_MAX: u32 = 0xfffe;

fn bit(name: c_int) -> u64 {
    1u64 << (name as u32 & 63)
}

/// # Safety
/// `val` readable for `len` bytes.
pub(crate) unsafe extern "C" fn rsetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    with(fd, |s| {
        if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's promise, and at least an int's bytes.
        let v = unsafe { val.cast::<c_int>().read_unaligned() };
        set(s, level, name, v)
    })
}

fn set(s: &Sock, level: c_int, name: c_int, v: c_int) -> Result<c_int, c_int> {
    // Sizes may change until a connection is made (on a listener: for the next ones).
    let fresh = matches!(s.kind(), Kind::Fresh | Kind::Listening(_));
    let mut o = s.opts();
    let on = v != 0;
    let (bits, on) = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            (&mut o.so, on)
        }
        // rsockets keeps SO_LINGER inverted, so that its default (0) reads as on.
        (libc::SOL_SOCKET, libc::SO_LINGER) => (&mut o.so, !on),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            if fresh {
                o.rs.rbuf_size = (v.max(0) as u32).saturating_mul(2);
            }
            return Ok(0);
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            if fresh {
                o.rs.sbuf_size = (v.max(0) as u32).saturating_mul(2).max(4096);
            }
            return Ok(0);
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => (&mut o.tcp, on),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG | libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => {
            return Ok(0)
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            if v <= 0 {
                return Err(libc::EINVAL);
            }
            o.keepalive_time = v;
            return Ok(0);
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => (&mut o.ipv6, on),
        (SOL_RDMA, _) => {
            if !fresh {
                return Err(libc::EINVAL);
            }
            let v = v.max(0) as u32;
            match name {
                RDMA_SQSIZE => o.rs.sq_size = v.min(QP_MAX),
                RDMA_RQSIZE => o.rs.rq_size = v.min(QP_MAX),
                RDMA_INLINE => o.rs.inline = v.min(QP_MAX),
                RDMA_IOMAPSIZE => o.rs.iomap_size = v.min(QP_MAX),
                _ => return Err(libc::ENOTSUP),
            }
            return Ok(0);
        }
        _ => return Err(libc::ENOTSUP),
    };
    if on {
        *bits |= bit(name);
    } else {
        *bits &= !bit(name);
    }
    Ok(0)
}

/// # Safety
/// `val` writable for `*len` bytes, `len` writable.
pub(crate) unsafe extern "C" fn rgetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut libc::socklen_t,
) -> c_int {
    with(fd, |s| {
        // SAFETY: the caller's promise.
        let room = unsafe { len.as_ref() }.copied().ok_or(libc::EINVAL)?;
        if val.is_null() {
            return Err(libc::EINVAL);
        }
        if level == libc::IPPROTO_TCP && matches!(name, libc::TCP_INFO | libc::TCP_CONGESTION) {
            // SAFETY: the caller's promise: `val` has `room` bytes, `len` is writable.
            unsafe { tcp_extra(s, name, val.cast(), room, len) };
            return Ok(0);
        }
        if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
            if (room as usize) < std::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            let l = libc::linger {
                l_onoff: c_int::from(s.opts().so & bit(libc::SO_LINGER) == 0),
                l_linger: 0,
            };
            // SAFETY: checked: `val` has room for a linger.
            unsafe {
                val.cast::<libc::linger>().write_unaligned(l);
                *len = std::mem::size_of::<libc::linger>() as libc::socklen_t;
            }
            return Ok(0);
        }
        if (room as usize) < std::mem::size_of::<c_int>() {
            return Err(libc::EINVAL);
        }
        let v = get(s, level, name)?;
        // SAFETY: checked: `val` has room for an int.
        unsafe {
            val.cast::<c_int>().write_unaligned(v);
            *len = std::mem::size_of::<c_int>() as libc::socklen_t;
        }
        Ok(0)
    })
}

/// TCP_INFO and TCP_CONGESTION, which rsockets leaves unsupported and iperf3 reads
/// (and then prints whatever was in its buffer): a connection's state and segment size
/// (what can be in flight is bounded by the send buffer, given as the window), and the
/// name of what paces sending, its credits.
///
/// # Safety
/// `val` writable for `room` bytes; `len` writable.
unsafe fn tcp_extra(
    s: &Sock,
    name: c_int,
    val: *mut u8,
    room: libc::socklen_t,
    len: *mut libc::socklen_t,
) {
    let bytes: Vec<u8> = if name == libc::TCP_CONGESTION {
        b"rsockets\0".to_vec()
    } else {
        // SAFETY: tcp_info is plain integers; all zero is a valid value.
        let mut t: libc::tcp_info = unsafe { std::mem::zeroed() };
        let (connected, mss) = match s.kind() {
            Kind::Stream(st) => (st.ready(Default::default()) == Default::default(), st.mtu()),
            _ => (false, 2048),
        };
        // TCP_ESTABLISHED, else TCP_CLOSE.
        t.tcpi_state = if connected { 1 } else { 7 };
        (t.tcpi_snd_mss, t.tcpi_rcv_mss, t.tcpi_advmss, t.tcpi_pmtu) = (mss, mss, mss, mss);
        t.tcpi_snd_cwnd = s.opts().rs.sbuf_size / mss.max(1);
        // SAFETY: `t` is a plain value of its own size.
        unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref(&t).cast::<u8>(),
                std::mem::size_of::<libc::tcp_info>(),
            )
        }
        .to_vec()
    };
    let n = (room as usize).min(bytes.len());
    // SAFETY: the caller's promise; `n` is within both.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), val, n);
        *len = n as libc::socklen_t;
    }
}

fn get(s: &Sock, level: c_int, name: c_int) -> Result<c_int, c_int> {
    let o = s.opts();
    let has = |bits: u64| c_int::from(bits & bit(name) != 0);
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            has(o.so)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rs.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.rs.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => s.domain,
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => libc::IPPROTO_TCP,
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            drop(o);
            match s.kind() {
                Kind::Stream(st) => st.take_error().and_then(|e| e.raw_os_error()).unwrap_or(0),
                Kind::Failed(e) => e,
                _ => 0,
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => has(o.tcp),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => o.keepalive_time,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            drop(o);
            match s.kind() {
                Kind::Stream(st) => st.mtu() as c_int,
                _ => 2048,
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => has(o.ipv6),
        (SOL_RDMA, RDMA_SQSIZE) => o.rs.sq_size as c_int,
        (SOL_RDMA, RDMA_RQSIZE) => o.rs.rq_size as c_int,
        (SOL_RDMA, RDMA_INLINE) => o.rs.inline as c_int,
        (SOL_RDMA, RDMA_IOMAPSIZE) => o.rs.iomap_size as c_int,
        _ => return Err(libc::ENOTSUP),
    })
}

/// `rfcntl`: F_GETFL and F_SETFL (O_NONBLOCK makes every call on the socket non-blocking).
pub(crate) extern "C" fn rfcntl(fd: c_int, cmd: c_int, arg: libc::c_long) -> c_int {
    with(fd, |s| match cmd {
        libc::F_GETFL => Ok(s.fl.load(Ordering::Relaxed)),
        libc::F_SETFL => {
            s.fl.store(arg as c_int, Ordering::Relaxed);
            Ok(0)
        }
        _ => Err(libc::ENOTSUP),
    })
}
