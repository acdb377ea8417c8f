//! An rsocket stream for tokio: `AsyncRead` and `AsyncWrite`.

use super::Fd;
use crate::rsocket::{RStream, Ready, RecvFlags};
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An [`RStream`] whose reads and writes are awaited: a call that would block arms the
/// stream's CQ and waits on its completion channel and its CM channel.
#[derive(Debug)]
pub struct AsyncRStream {
    comp: AsyncFd<Fd>,
    cm: AsyncFd<Fd>,
    stream: RStream,
}

impl AsyncRStream {
    /// `stream` (connected), its reads and writes to be awaited (within a tokio runtime).
    pub fn new(stream: RStream) -> io::Result<AsyncRStream> {
        let [comp, cm] = stream.fds();
        // SAFETY: `stream` owns both descriptors (its completion and event channels) and
        // is dropped after both registrations (field order).
        let comp = unsafe { super::register(comp.as_raw_fd()) }?;
        // SAFETY: as above.
        let cm = unsafe { super::register(cm.as_raw_fd()) }?;
        Ok(AsyncRStream { comp, cm, stream })
    }

    /// The stream, for what does not wait.
    pub fn get_ref(&self) -> &RStream {
        &self.stream
    }

    /// Runs `op` (non-blocking) until it does not say WouldBlock, waiting for `want`
    /// between tries.
    fn poll_op<T>(
        &self,
        cx: &mut Context<'_>,
        want: Ready,
        mut op: impl FnMut(&RStream) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            match op(&self.stream) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
            if self.stream.arm(want).is_some() {
                continue; // ready already
            }
            let comp = self.comp.poll_read_ready(cx)?;
            let cm = self.cm.poll_read_ready(cx)?;
            if let Poll::Ready(mut g) = comp {
                self.stream.woke();
                g.clear_ready();
                continue;
            }
            if let Poll::Ready(mut g) = cm {
                g.clear_ready();
                if self.stream.arm(want).is_some() {
                    continue;
                }
            }
            // Until woken, nothing polls: the engine thread moves the packets meanwhile.
            self.stream.app_leaves();
            return Poll::Pending;
        }
    }
}

const READ: Ready = Ready {
    readable: true,
    writable: false,
    hangup: false,
    error: false,
};
const WRITE: Ready = Ready {
    readable: false,
    writable: true,
    hangup: false,
    error: false,
};

impl AsyncRead for AsyncRStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let flags = RecvFlags {
            nonblock: true,
            ..RecvFlags::default()
        };
        let dst = buf.initialize_unfilled();
        match self.poll_op(cx, READ, |s| s.recv(dst, flags)) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for AsyncRStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_op(cx, WRITE, |s| s.send(buf, true))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // What `send` took is posted; the peer's credits, not a buffer here, hold it back.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.stream.shutdown(false, true))
    }
}
