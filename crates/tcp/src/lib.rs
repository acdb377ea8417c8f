//! iWARP's driver (issue 60): the TCP side of an oxrdma engine's iWARP QPs. The protocol
//! is the core's, without I/O (`oxrdma_core::iwarp`); this crate owns the sockets.
//!
//! - [`mpa`]: MPA's exchange on a new connection (RFC 5044 with RFC 6581's enhanced
//!   setup), blocking: the initiator's request and the responder's answer.
//! - [`Streams`]: the established connections of a device's QPs, driven without
//!   blocking: bytes read go to their QP, what the QP sends is written, a stream that ends
//!   ends its QP, and one epoll set over the sockets is what a thread sleeps on.

pub mod mpa;
mod streams;

pub use mpa::{Established, MpaError, Request};
pub use streams::Streams;
