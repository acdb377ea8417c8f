//! rsockets: byte-stream sockets over an RC connection made through the RDMA CM,
//! wire-compatible with rdma-core's (librdmacm's `rsocket`, `rsend`, `rrecv`,
//! `riomap`, `riowrite`).
//!
//! Each side keeps a receive buffer the peer writes into with RDMA WRITE WITH IMMEDIATE
//! (the immediate data says how many bytes) and posts zero-length receives the writes
//! consume. The connection data in the REQ and REP say where the first half of each
//! receive buffer is; after that each side writes the other a credit update (an SGE
//! naming a receive-buffer half it has read, and how many more messages it may send)
//! into a small table the peer registered for it. `riomap` lets the peer write straight
//! into a mapped buffer with plain RDMA WRITEs (`riowrite`).

use rustix::io::Errno;

mod answer;
mod flow;
mod iomap;
mod listener;
mod maps;
mod stream;

pub use listener::RListener;
pub use stream::{RStream, Ready, RecvFlags};

/// Sizes of a connection's queues and buffers (`rsetsockopt` SOL_RDMA and
/// SO_SNDBUF/SO_RCVBUF). The defaults are rdma-core's but for the buffers: 1 MiB each
/// rather than 128 KiB (TCP's autotuning grows past that on loopback too): a stream
/// refills a 64 KiB receive half every few microseconds, and each refill is a credit
/// round trip (iperf3 on loopback: 6.4 Gb/s with 128 KiB, 12 with 1 MiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RsOptions {
    /// Send and receive queue depths (16 to 65534, and at most the device's).
    pub sq_size: u32,
    /// The receive queue's depth (as `sq_size`).
    pub rq_size: u32,
    /// Sends of up to this many bytes are posted inline (no copy into the send buffer).
    pub inline: u32,
    /// Send and receive buffer bytes.
    pub sbuf_size: u32,
    /// The receive buffer's bytes (the peer WRITEs into it).
    pub rbuf_size: u32,
    /// Entries of the table the peer's `riomap` entries are written into.
    pub iomap_size: u32,
}

impl Default for RsOptions {
    fn default() -> Self {
        RsOptions {
            sq_size: 384,
            rq_size: 384,
            inline: 64,
            sbuf_size: 1 << 20,
            rbuf_size: 1 << 20,
            iomap_size: 0,
        }
    }
}

/// An I/O error with errno `e`.
pub(crate) fn os(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// What a call that moved `done` bytes before failing with `e` returns: the bytes if
/// any (the error shows on the next call), as sockets do.
pub(crate) fn partial(done: usize, e: std::io::Error) -> std::io::Result<usize> {
    if done == 0 {
        Err(e)
    } else {
        Ok(done)
    }
}

/// A library error as an I/O error (its errno, as librdmacm would set it).
pub(crate) fn io(e: crate::Error) -> std::io::Error {
    match e {
        crate::Error::Io(e) => e,
        crate::Error::Cm(oxrdma_core::cm::CmError::InUse) => os(Errno::ADDRINUSE),
        crate::Error::Verbs(oxrdma_core::VerbsError::OutOfMemory) => os(Errno::NOMEM),
        _ => os(Errno::INVAL),
    }
}
