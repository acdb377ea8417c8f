//! iWARP (issue 60): the verbs over a TCP byte stream, sans-IO. The driver owns the TCP
//! socket and hands this module what it read; this module says what to write.
//!
//! So far: the MPA exchange that starts a connection (`setup`), messages cut into FPDUs
//! and read back from the stream (`stream`), and a QP's data path over them (`qp`).

pub(crate) mod memory;
pub mod qp;
pub mod setup;
pub mod stream;

pub use setup::{Negotiated, Rtr, Setup, SetupConfig, SetupError, SetupEvent};
pub use stream::{max_payload, write_fpdu, FpduReader, Segmenter};
