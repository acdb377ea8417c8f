//! Why a port could not be opened (alone, or as a member of its address's group).

use std::io;
use std::net::SocketAddr;

/// Why a port could not be opened, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("{addr} is already in use and cannot be shared (held by Linux rxe, by another user's oxrdma processes, by oxrdma processes run with another TMPDIR or by a device opened alone, or this one was to be alone): give this one another address")]
    InUse { addr: SocketAddr },
    #[error("{addr} is not an address of this host")]
    NotLocal { addr: SocketAddr },
    #[error("cannot open a UDP socket on {addr}: {source}")]
    Io { addr: SocketAddr, source: io::Error },
}
