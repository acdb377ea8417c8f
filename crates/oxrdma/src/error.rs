//! Errors of the public API.

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb refused its arguments or the object's state.
    #[error(transparent)]
    Verbs(#[from] oxrdma_core::VerbsError),
    /// The device's address could not be bound.
    #[error(transparent)]
    Bind(#[from] oxrdma_udp::BindError),
    /// The operating system refused (sockets, descriptors, files).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// What a peer sent to connect does not make sense.
    #[error("bad connection data from the peer: {0}")]
    BadPeer(String),
    /// The device's connection manager refused.
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
    /// The peer turned a connection down (`cm::connect`): its REJ reason (28: the
    /// application's), and its private data.
    #[error("the peer rejected the connection (reason {status})")]
    Rejected {
        /// The REJ reason (28: the peer application's).
        status: i32,
        /// What the peer sent with it.
        private_data: Vec<u8>,
    },
    /// A work request that completed in error (`WorkCompletion::result`).
    #[error(transparent)]
    Completion(#[from] oxrdma_core::WcError),
    /// The rdma-core backend could not start: no `libibverbs.so.1`, or no such device.
    #[error("rdma-core: {0}")]
    NoRdmaCore(String),
    /// A verb of the system's libibverbs failed with `errno`.
    #[error("rdma-core: {verb} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    RdmaCore {
        /// The verb (`ibv_create_qp`, ...).
        verb: &'static str,
        /// Its errno.
        errno: i32,
    },
    /// What the object's device does not offer (the engine's extras on an rdma-core
    /// device, or a verb its provider lacks).
    #[error("not offered on this device: {0}")]
    Unsupported(&'static str),
}

/// A result of the public API.
pub type Result<T> = std::result::Result<T, Error>;

/// An error as `std::io` code expects one: its kind says what went wrong (an argument,
/// a missing object, an exhausted resource, an address in use), the message is this
/// error's, and an I/O error is itself.
impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        use oxrdma_core::cm::CmError;
        use oxrdma_core::VerbsError as V;
        use std::io::ErrorKind as K;
        let kind = match &e {
            Error::Io(_) => {
                let Error::Io(io) = e else { unreachable!() };
                return io;
            }
            Error::Verbs(v) => match v {
                V::InvalidArgument(_) | V::InvalidTransition { .. } | V::BadState { .. } => {
                    K::InvalidInput
                }
                V::NotFound(_) => K::NotFound,
                V::Exhausted(_) | V::OutOfMemory => K::OutOfMemory,
                V::Busy(_) => K::ResourceBusy,
                _ => K::Other,
            },
            Error::Bind(oxrdma_udp::BindError::InUse { .. }) | Error::Cm(CmError::InUse) => {
                K::AddrInUse
            }
            Error::Bind(oxrdma_udp::BindError::NotLocal { .. }) => K::AddrNotAvailable,
            Error::Bind(_) => K::Other,
            Error::BadPeer(_) => K::InvalidData,
            Error::Cm(CmError::UnknownId) | Error::NoInterface(_) => K::NotFound,
            Error::Cm(_) | Error::CmState(_) | Error::Config(_) => K::InvalidInput,
            Error::Completion(_) => K::Other,
            Error::Rejected { .. } => K::ConnectionRefused,
            Error::NoRdmaCore(_) => K::NotFound,
            Error::RdmaCore { errno, .. } => std::io::Error::from_raw_os_error(*errno).kind(),
            Error::Unsupported(_) => K::Unsupported,
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind as K;

    #[test]
    fn errors_become_io_errors_of_the_kind_they_are() {
        let io = |e: Error| std::io::Error::from(e);
        let v = |e| io(Error::Verbs(e));
        use oxrdma_core::VerbsError as V;
        assert_eq!(v(V::InvalidArgument("x")).kind(), K::InvalidInput);
        assert_eq!(v(V::NotFound("queue pair")).kind(), K::NotFound);
        assert_eq!(v(V::Exhausted("QPs")).kind(), K::OutOfMemory);
        assert_eq!(v(V::Busy("PD")).kind(), K::ResourceBusy);
        assert_eq!(
            io(Error::Cm(oxrdma_core::cm::CmError::InUse)).kind(),
            K::AddrInUse
        );
        assert_eq!(io(Error::BadPeer("junk".into())).kind(), K::InvalidData);
        let e = io(Error::Config("OXRDMA_LIMITS: no limit named `x`".into()));
        assert_eq!(e.kind(), K::InvalidInput);
        assert!(e.to_string().contains("OXRDMA_LIMITS"), "{e}");
        let raw = std::io::Error::from_raw_os_error(libc_eagain());
        let back = io(Error::Io(raw));
        assert_eq!(
            back.raw_os_error(),
            Some(libc_eagain()),
            "an I/O error is itself"
        );
    }

    fn libc_eagain() -> i32 {
        rustix::io::Errno::AGAIN.raw_os_error()
    }
}
