//! iWARP on the wire: the three layers that carry the verbs over a TCP byte stream.
//!
//! - [`mpa`] (RFC 5044, RFC 6581): the request/reply exchange that turns a TCP connection
//!   into an iWARP one, and the FPDU framing (a length, the DDP segment, pad, CRC32c)
//!   that lets a receiver find segment boundaries in the stream.
//! - [`ddp`] (RFC 5041, RFC 5040): the DDP header that says where a segment's payload is
//!   placed (tagged: a remote buffer's STag and offset; untagged: a queue, message and
//!   offset), with the RDMAP control byte it carries, and the RDMAP bodies that follow
//!   it (READ request, TERMINATE).
//!
//! As for RoCEv2: parse and emit, no I/O, no allocation, no input that panics.

pub mod ddp;
pub mod mpa;

pub use ddp::{DdpRepr, Placement, Queue, RdmapOpcode, ReadRequestRepr, TerminateRepr};
pub use mpa::{EnhancedRepr, FrameKind, MpaFrameRepr};
