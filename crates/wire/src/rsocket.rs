//! rsockets' wire format (librdmacm's stream sockets over an RC connection): the 40-byte
//! connection data a REQ and its REP carry after the RDMA CM's header, the immediate data
//! that carries every message (its operation in bits 31:29, a count in 28:0), and the
//! 16-byte SGE a credit update writes into the peer's memory.
//!
//! The connection data's SGEs travel big-endian; an SGE a credit update writes is in the
//! writer's own byte order, which the peer knows from the connection data's `FLAG_NET`
//! and swaps if it differs from its own (`RsSge::parse_order`).

use crate::error::{need, Result, WireError};
use crate::field::{set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};

/// The only rsockets protocol version.
pub const VERSION: u8 = 1;
/// Connection data flag: the sender is big-endian.
pub const FLAG_NET: u8 = 1 << 0;
/// Connection data flag: the sender takes direct writes into mapped memory (`riomap`).
pub const FLAG_IOMAP: u8 = 1 << 1;
/// Entries in each side's target SGL (the peer's credit updates alternate between them).
pub const SGL_SIZE: u32 = 2;

/// One scatter-gather entry as rsockets exchanges it: where, under which key, how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RsSge {
    /// Virtual address of the buffer.
    pub addr: u64,
    /// Remote key (R_Key) of the memory region holding it.
    pub key: u32,
    /// Length of the buffer in bytes.
    pub length: u32,
}

impl RsSge {
    /// Length of an SGE on the wire in bytes.
    pub const LEN: usize = 16;

    /// Reads the SGE at the start of `b`, big-endian (`net`) or little-endian.
    pub fn parse_order(b: &[u8], net: bool) -> Result<RsSge> {
        need("rsocket SGE", b, Self::LEN)?;
        let s = RsSge {
            addr: u64_at(b, 0),
            key: u32_at(b, 8),
            length: u32_at(b, 12),
        };
        Ok(if net {
            s
        } else {
            RsSge {
                addr: s.addr.swap_bytes(),
                key: s.key.swap_bytes(),
                length: s.length.swap_bytes(),
            }
        })
    }

    /// Writes the SGE into the start of `b`, big-endian (`net`) or little-endian.
    pub fn emit_order(&self, b: &mut [u8], net: bool) -> Result<()> {
        need("rsocket SGE", b, Self::LEN)?;
        let s = if net {
            *self
        } else {
            RsSge {
                addr: self.addr.swap_bytes(),
                key: self.key.swap_bytes(),
                length: self.length.swap_bytes(),
            }
        };
        set_u64(b, 0, s.addr);
        set_u32(b, 8, s.key);
        set_u32(b, 12, s.length);
        Ok(())
    }
}

/// The connection data (`struct rs_conn_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    /// Flags: [`FLAG_NET`] and [`FLAG_IOMAP`].
    pub flags: u8,
    /// Receives the sender keeps posted: how many messages the peer may send at first.
    pub credits: u16,
    /// The size of the sender's iomap table, scaled to 8 bits (`scale`).
    pub target_iomap_size: u8,
    /// Where the peer writes its credit updates (`SGL_SIZE` entries of `RsSge`).
    pub target_sgl: RsSge,
    /// The first half of the sender's receive buffer, for the peer's first data.
    pub data_buf: RsSge,
}

impl ConnData {
    /// Length of the connection data in bytes (version byte included).
    pub const LEN: usize = 40;

    /// Reads the connection data at the start of `b`; a version other than 1 is an error
    /// (rsockets refuses the connection).
    pub fn parse(b: &[u8]) -> Result<ConnData> {
        need("rsocket connection data", b, Self::LEN)?;
        if b[0] != VERSION {
            return Err(WireError::Unsupported("rsocket version"));
        }
        Ok(ConnData {
            flags: b[1],
            credits: u16_at(b, 2),
            target_iomap_size: b[7],
            target_sgl: RsSge::parse_order(&b[8..24], true)?,
            data_buf: RsSge::parse_order(&b[24..40], true)?,
        })
    }

    /// Writes the connection data into the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        need("rsocket connection data", b, Self::LEN)?;
        b[0] = VERSION;
        b[1] = self.flags;
        set_u16(b, 2, self.credits);
        b[4..7].fill(0);
        b[7] = self.target_iomap_size;
        self.target_sgl.emit_order(&mut b[8..24], true)?;
        self.data_buf.emit_order(&mut b[24..40], true)
    }
}

/// What a message's immediate data says it is (bits 31:29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Data written at the current target SGE; the count is its length in bytes.
    Data,
    /// A credit update: an `RsSge` written into the target SGL; the count is the new limit
    /// of the sender's receive sequence.
    Sgl,
    /// An iomap entry written into the iomap table; the count is its index.
    IomapSgl,
    /// A control message; the count is a `Ctrl` value.
    Ctrl,
    /// A reserved value (1, 2, 3 or 5: 2 is rsockets' local-only "write").
    Reserved(u8),
}

/// Control messages (`Op::Ctrl`).
pub mod ctrl {
    /// The sender is closing the connection.
    pub const DISCONNECT: u32 = 0;
    /// A keepalive, carrying nothing else.
    pub const KEEPALIVE: u32 = 1;
    /// The sender has shut down its sending direction.
    pub const SHUTDOWN: u32 = 2;
}

/// The largest count a message carries (29 bits).
pub const MAX_COUNT: u32 = (1 << 29) - 1;

impl Op {
    fn value(self) -> u32 {
        match self {
            Op::Data => 0,
            Op::Sgl => 4,
            Op::IomapSgl => 6,
            Op::Ctrl => 7,
            Op::Reserved(v) => u32::from(v & 7),
        }
    }

    /// The immediate data of message `self` with `count` (at most `MAX_COUNT`).
    pub fn imm(self, count: u32) -> u32 {
        self.value() << 29 | (count & MAX_COUNT)
    }

    /// The message an immediate datum (host order) holds, and its count.
    pub fn split(imm: u32) -> (Op, u32) {
        let op = match imm >> 29 {
            0 => Op::Data,
            4 => Op::Sgl,
            6 => Op::IomapSgl,
            7 => Op::Ctrl,
            v => Op::Reserved(v as u8),
        };
        (op, imm & MAX_COUNT)
    }
}

/// rsockets' 8-bit scaling of sizes in the connection data: up to 128 as is, larger ones
/// as 0x80 | (value >> 8).
pub fn scale(value: u32) -> u8 {
    if value <= 128 {
        value as u8
    } else {
        (0x80 | (value >> 8).min(0x7f)) as u8
    }
}

/// The size `scale` encoded.
pub fn unscale(s: u8) -> u32 {
    if s <= 128 {
        u32::from(s)
    } else {
        u32::from(s & 0x7f) << 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_data_is_forty_big_endian_bytes() {
        let c = ConnData {
            flags: FLAG_IOMAP,
            credits: 384,
            target_iomap_size: scale(0),
            target_sgl: RsSge {
                addr: 0x5555_0000_1000,
                key: 0x1234,
                length: SGL_SIZE,
            },
            data_buf: RsSge {
                addr: 0x5555_0000_8000,
                key: 0x5678,
                length: 65536,
            },
        };
        let mut b = [0xffu8; 40];
        c.emit(&mut b).unwrap();
        // Linux x86's: version 1, flags 0x02 (iomap, little-endian host), credits 384.
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x5555_0000_1000u64.to_be_bytes());
        assert_eq!(&b[20..24], &2u32.to_be_bytes());
        assert_eq!(ConnData::parse(&b).unwrap(), c);
        b[0] = 2;
        assert!(ConnData::parse(&b).is_err(), "another version is refused");
        assert!(ConnData::parse(&b[..39]).is_err());
    }

    #[test]
    fn immediate_data_carries_the_op_in_its_top_three_bits() {
        assert_eq!(Op::Data.imm(4096), 4096);
        assert_eq!(Op::Sgl.imm(400), 0x8000_0190);
        assert_eq!(Op::Ctrl.imm(ctrl::SHUTDOWN), 0xe000_0002);
        assert_eq!(Op::split(0xe000_0000), (Op::Ctrl, ctrl::DISCONNECT));
        assert_eq!(Op::split(0xc000_0003), (Op::IomapSgl, 3));
        assert_eq!(Op::split(0x4000_0001), (Op::Reserved(2), 1));
        for op in [Op::Data, Op::Sgl, Op::IomapSgl, Op::Ctrl] {
            assert_eq!(Op::split(op.imm(MAX_COUNT)), (op, MAX_COUNT));
        }
    }

    #[test]
    fn a_credit_update_sge_is_in_the_writers_byte_order() {
        let s = RsSge {
            addr: 0x0102_0304_0506_0708,
            key: 0x0a0b_0c0d,
            length: 0x10000,
        };
        let mut le = [0u8; 16];
        s.emit_order(&mut le, false).unwrap();
        assert_eq!(&le[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(RsSge::parse_order(&le, false).unwrap(), s);
        let mut be = [0u8; 16];
        s.emit_order(&mut be, true).unwrap();
        assert_eq!(RsSge::parse_order(&be, true).unwrap(), s);
        assert_ne!(le, be);
    }

    #[test]
    fn sizes_scale_to_eight_bits_as_rsockets_does() {
        assert_eq!(scale(100), 100);
        assert_eq!(scale(128), 128);
        assert_eq!(scale(4096), 0x80 | 16);
        assert_eq!(unscale(scale(4096)), 4096);
        assert_eq!(unscale(100), 100);
    }
}
