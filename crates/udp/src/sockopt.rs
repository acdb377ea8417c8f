//! Socket options the standard library and rustix do not set.

use std::io;
use std::net::UdpSocket;

/// Sets the integer socket option `name` at `level`.
pub(crate) fn set_int(
    socket: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor, and an option value that is a live c_int of the
    // length passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
