//! Errors of the public API.

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Verbs(#[from] oxrdma_core::VerbsError),
    #[error(transparent)]
    Bind(#[from] oxrdma_udp::BindError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad connection data from the peer: {0}")]
    BadPeer(String),
    #[error("connection manager: {0}")]
    Cm(#[from] oxrdma_core::cm::CmError),
    /// An RDMA CM call out of turn (e.g. `connect` before the route is resolved), with
    /// what it needs (EINVAL in librdmacm).
    #[error("RDMA CM: {0}")]
    CmState(&'static str),
    /// A device asked for on a network interface this host (namespace) does not have.
    #[error("no network interface {0}")]
    NoInterface(String),
    /// A setting from the environment or a configuration file that does not parse.
    #[error("configuration: {0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;
