//! iWARP (issue 60): the verbs over a TCP byte stream, sans-IO. The driver owns the TCP
//! socket and hands this module what it read; this module says what to write.
//!
//! So far: the MPA exchange that starts a connection (`setup`).

pub mod setup;

pub use setup::{Negotiated, Rtr, Setup, SetupConfig, SetupError, SetupEvent};
