//! `async` completions, RDMA CM events and rsocket streams on tokio (the `tokio`
//! feature). Each waits on the descriptor its blocking twin sleeps on (a completion
//! channel's, an event channel's), registered with tokio's reactor: an idle task costs no
//! CPU, and the device's engine thread moves the packets meanwhile.

mod cm;
mod cq;
mod stream;

pub use cm::AsyncEventChannel;
pub use cq::AsyncCq;
pub use stream::AsyncRStream;

use std::os::fd::{AsRawFd, RawFd};
use tokio::io::unix::AsyncFd;

/// A descriptor owned elsewhere (by the object kept beside it), for `AsyncFd`.
#[derive(Debug)]
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Registers `fd` with tokio's reactor for readability.
///
/// # Safety
/// `fd` stays open, the same file, until the registration is dropped: the object that
/// owns it is kept beside the registration and dropped after it.
unsafe fn register(fd: RawFd) -> std::io::Result<AsyncFd<Fd>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(std::io::Error::other(
            "made outside a tokio runtime (enter one first)",
        ));
    }
    // SAFETY: the caller's promise is the one tokio asks for.
    unsafe { AsyncFd::register_with_interest(Fd(fd), tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}
