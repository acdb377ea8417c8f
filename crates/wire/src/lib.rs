//! RoCEv2 on the wire: the InfiniBand transport headers that ride in UDP datagrams to port
//! 4791, their opcode table, 24-bit PSN arithmetic and the invariant CRC; and iWARP's MPA,
//! DDP and RDMAP headers ([`iwarp`]).
//!
//! Each header has a zero-copy view (`Bth<T>`, `Reth<T>`, …) over any `AsRef<[u8]>` and a
//! plain `…Repr` value with `parse` and `emit`, in the manner of smoltcp. [`PacketRepr`]
//! handles a whole UDP payload. Nothing here does I/O or allocates, and no input makes it
//! panic: every rejection is a [`WireError`] naming the reason.

#![deny(missing_docs)]

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod checksum;
pub mod cm;
pub mod cma;
pub mod deth;
pub mod error;
pub mod feth;
mod field;
pub mod icrc;
pub mod icrc_id;
pub mod icrc_part;
pub mod ieth;
pub mod immdt;
pub mod iwarp;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;
pub mod rsocket;
pub mod run;
pub mod sack;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use atomic_ack_eth::AtomicAckEthRepr;
pub use atomic_eth::AtomicEthRepr;
pub use bth::BthRepr;
pub use deth::DethRepr;
pub use error::{Result, WireError};
pub use feth::FethRepr;
pub use mad::MadHeader;
pub use opcode::{Headers, Opcode, OpcodeInfo, Operation, Payload, Position, Transport};
pub use packet::{ExtHeaders, PacketRepr};
pub use psn::Psn;
pub use reth::RethRepr;
pub use run::Run;

/// The UDP destination port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;
/// The default partition key, which every capture uses.
pub const DEFAULT_PKEY: u16 = 0xffff;
