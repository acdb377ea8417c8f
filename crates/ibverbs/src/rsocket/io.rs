//! Moving data: `rrecv`/`rsend` and their variants, `riomap`/`riowrite`.

use super::calls::write_addr;
use super::{errno, with, Sock};
use oxrdma::rsocket::RecvFlags;
use std::ffi::{c_int, c_void};
use std::io::ErrorKind;

/// Whether a call waits: not with MSG_DONTWAIT or the socket's O_NONBLOCK.
fn nonblock(s: &Sock, flags: c_int) -> bool {
    s.nonblocking() || flags & libc::MSG_DONTWAIT != 0
}

fn io_errno(e: &std::io::Error) -> c_int {
    if e.kind() == ErrorKind::WouldBlock {
        libc::EAGAIN
    } else {
        errno(e)
    }
}

/// The iovecs of a call as byte slices.
///
/// # Safety
/// `iov` NULL or `n` iovecs, each readable (and, for a receive, writable) for its length.
unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> Result<Vec<&'a mut [u8]>, c_int> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise.
    let v = unsafe { std::slice::from_raw_parts(iov, n as usize) };
    if v.iter().any(|i| i.iov_len > 0 && i.iov_base.is_null()) {
        return Err(libc::EFAULT);
    }
    Ok(v.iter()
        .filter(|i| i.iov_len > 0)
        // SAFETY: the caller's promise, for each iovec.
        .map(|i| unsafe { std::slice::from_raw_parts_mut(i.iov_base.cast::<u8>(), i.iov_len) })
        .collect())
}

/// The iovecs of a `msghdr`; ancillary data is not supported (as in rsockets).
///
/// # Safety
/// `msg` NULL or a valid `msghdr` whose iovecs are valid.
unsafe fn msg_iovecs<'a>(msg: *const libc::msghdr) -> Result<Vec<&'a mut [u8]>, c_int> {
    // SAFETY: the caller's promise.
    let m = unsafe { msg.as_ref() }.ok_or(libc::EINVAL)?;
    if !m.msg_control.is_null() && m.msg_controllen > 0 {
        return Err(libc::ENOTSUP);
    }
    // SAFETY: the caller's promise.
    unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }
}

/// Runs `op` on each buffer in turn, stopping at the first it does not fill (or a
/// failure after some bytes moved): the bytes moved.
fn each_buffer(
    bufs: Vec<&mut [u8]>,
    mut op: impl FnMut(&mut [u8], bool) -> std::io::Result<usize>,
) -> Result<isize, c_int> {
    let mut total = 0usize;
    for b in bufs {
        match op(b, total == 0) {
            Ok(n) => {
                total += n;
                if n < b.len() {
                    break;
                }
            }
            Err(e) if total == 0 => return Err(io_errno(&e)),
            Err(_) => break,
        }
    }
    Ok(total as isize)
}

/// Receives into each buffer in turn: after the first, only what is already there.
fn recv_into(s: &Sock, bufs: Vec<&mut [u8]>, flags: c_int) -> Result<isize, c_int> {
    let st = s.stream()?;
    let f = RecvFlags {
        nonblock: nonblock(s, flags),
        peek: flags & libc::MSG_PEEK != 0,
        waitall: flags & libc::MSG_WAITALL != 0,
    };
    each_buffer(bufs, |b, first| {
        let f = RecvFlags {
            nonblock: f.nonblock || !first,
            ..f
        };
        st.recv(b, f)
    })
}

/// Sends each buffer in turn, stopping at the first that does not go whole.
fn send_from(s: &Sock, bufs: Vec<&mut [u8]>, flags: c_int) -> Result<isize, c_int> {
    let st = s.stream()?;
    let nb = nonblock(s, flags);
    each_buffer(bufs, |b, _| st.send(b, nb))
}

/// # Safety
/// `buf` writable for `len` bytes.
pub(crate) unsafe extern "C" fn rrecv(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
) -> isize {
    let iov = libc::iovec {
        iov_base: buf,
        iov_len: len,
    };
    with(fd, |s| {
        // SAFETY: the caller's promise.
        recv_into(s, unsafe { iovecs(&iov, 1) }?, flags)
    })
}

/// # Safety
/// `buf` writable for `len` bytes; `src` NULL or writable for `*alen` bytes.
pub(crate) unsafe extern "C" fn rrecvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src: *mut libc::sockaddr,
    alen: *mut libc::socklen_t,
) -> isize {
    // SAFETY: the caller's promise.
    let n = unsafe { rrecv(fd, buf, len, flags) };
    if n > 0 {
        if let Some(p) = super::get(fd).and_then(|s| s.stream().ok()?.peer_addr()) {
            // SAFETY: the caller's promise.
            unsafe { write_addr(p, src, alen) };
        }
    }
    n
}

/// # Safety
/// `msg` a valid `msghdr` with valid iovecs.
pub(crate) unsafe extern "C" fn rrecvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    with(fd, |s| {
        // SAFETY: the caller's promise.
        let bufs = unsafe { msg_iovecs(msg) }?;
        // SAFETY: as above (`msg_iovecs` checked it is not NULL).
        unsafe { (*msg).msg_flags = 0 };
        recv_into(s, bufs, flags)
    })
}

/// # Safety
/// `buf` writable for `len` bytes.
pub(crate) unsafe extern "C" fn rread(fd: c_int, buf: *mut c_void, len: usize) -> isize {
    // SAFETY: the caller's promise.
    unsafe { rrecv(fd, buf, len, 0) }
}

/// # Safety
/// `iov` `n` valid iovecs.
pub(crate) unsafe extern "C" fn rreadv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's promise.
    with(fd, |s| recv_into(s, unsafe { iovecs(iov, n) }?, 0))
}

/// # Safety
/// `buf` readable for `len` bytes.
pub(crate) unsafe extern "C" fn rsend(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
) -> isize {
    let iov = libc::iovec {
        iov_base: buf.cast_mut(),
        iov_len: len,
    };
    // SAFETY: the caller's promise (the bytes are only read).
    with(fd, |s| send_from(s, unsafe { iovecs(&iov, 1) }?, flags))
}

/// # Safety
/// `buf` readable for `len` bytes.
pub(crate) unsafe extern "C" fn rsendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    dst: *const libc::sockaddr,
    alen: libc::socklen_t,
) -> isize {
    if !dst.is_null() || alen != 0 {
        // A stream is connected already (rsockets says the same).
        return with(fd, |_| Err::<isize, _>(libc::EISCONN));
    }
    // SAFETY: the caller's promise.
    unsafe { rsend(fd, buf, len, flags) }
}

/// # Safety
/// `msg` a valid `msghdr` with valid iovecs.
pub(crate) unsafe extern "C" fn rsendmsg(
    fd: c_int,
    msg: *const libc::msghdr,
    flags: c_int,
) -> isize {
    with(fd, |s| {
        // SAFETY: the caller's promise (the bytes are only read).
        let bufs = unsafe { msg_iovecs(msg) }?;
        send_from(s, bufs, flags)
    })
}

/// # Safety
/// `buf` readable for `len` bytes.
pub(crate) unsafe extern "C" fn rwrite(fd: c_int, buf: *const c_void, len: usize) -> isize {
    // SAFETY: the caller's promise.
    unsafe { rsend(fd, buf, len, 0) }
}

/// # Safety
/// `iov` `n` valid iovecs.
pub(crate) unsafe extern "C" fn rwritev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's promise (the bytes are only read).
    with(fd, |s| send_from(s, unsafe { iovecs(iov, n) }?, 0))
}

/// `riomap`: `offset` -1 maps at the buffer's address.
///
/// # Safety
/// `buf` valid for `len` bytes until `riounmap` or `rclose`.
pub(crate) unsafe extern "C" fn riomap(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    prot: c_int,
    _flags: c_int,
    offset: libc::off_t,
) -> libc::off_t {
    with(fd, |s| {
        if prot & !libc::PROT_WRITE != 0 || buf.is_null() || len == 0 {
            return Err(libc::EINVAL);
        }
        let st = s.stream()?;
        let at = (offset != -1).then_some(offset as u64);
        // SAFETY: the caller's promise is the one `iomap` asks for.
        let off = unsafe { st.iomap(buf.cast(), len, prot & libc::PROT_WRITE != 0, at) }
            .map_err(|e| errno(&e))?;
        Ok(off as libc::off_t)
    })
}

pub(crate) extern "C" fn riounmap(fd: c_int, buf: *mut c_void, len: usize) -> c_int {
    with(fd, |s| {
        s.stream()?
            .iounmap(buf.cast(), len)
            .map_err(|e| errno(&e))?;
        Ok(0)
    })
}

/// `riowrite`: returns the bytes written, or -1 (as a size_t) with errno.
///
/// # Safety
/// `buf` readable for `count` bytes.
pub(crate) unsafe extern "C" fn riowrite(
    fd: c_int,
    buf: *const c_void,
    count: usize,
    offset: libc::off_t,
    flags: c_int,
) -> usize {
    let n: isize = with(fd, |s| {
        let st = s.stream()?;
        if buf.is_null() && count > 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) };
        st.iowrite(data, offset as u64, nonblock(s, flags))
            .map(|n| n as isize)
            .map_err(|e| io_errno(&e))
    });
    n as usize
}
