//! Memory at the other end of a connection, as a peer described it: what RDMA WRITE,
//! READ and atomics aim at.

use crate::error::{Result, VerbsError};
use std::ops::{Bound, RangeBounds};

/// Memory a peer may access: its address as the peer names it, its rkey, its length
/// (`oxrdma::MemoryRegion::remote`). A work request aimed at a
/// `RemoteBuf` cannot miss its rkey, and a slice of one cannot reach past its end.
///
/// ```
/// use oxrdma_core::RemoteBuf;
/// let peer = RemoteBuf::new(0x7f00_0000_1000, 0xabcd, 4096).unwrap();
/// let tail = peer.slice(4000..).unwrap();
/// assert_eq!((tail.addr(), tail.rkey(), tail.len()), (0x7f00_0000_1000 + 4000, 0xabcd, 96));
/// assert!(peer.slice(4000..4097).is_err(), "past the end");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RemoteBuf {
    addr: u64,
    rkey: u32,
    len: u64,
}

impl RemoteBuf {
    /// A peer's memory as it described it (for a peer that is not oxrdma: `len` bytes at
    /// `addr` under `rkey`). `None` if the range wraps around the address space.
    pub fn new(addr: u64, rkey: u32, len: u64) -> Option<RemoteBuf> {
        addr.checked_add(len)?;
        Some(RemoteBuf { addr, rkey, len })
    }

    /// The address of its first byte, as the peer names it.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The key that grants access to it.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `range` of it (offsets from its start), or an error if the range reaches
    /// past its end.
    pub fn slice(&self, range: impl RangeBounds<u64>) -> Result<RemoteBuf> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(VerbsError::InvalidArgument(
                "a remote slice reaches past the buffer's end",
            ));
        }
        Ok(RemoteBuf {
            addr: self.addr + start,
            rkey: self.rkey,
            len: end - start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_stays_inside_its_buffer() {
        let r = RemoteBuf::new(0x1000, 5, 100).unwrap();
        let s = r.slice(10..30).unwrap();
        assert_eq!((s.addr(), s.rkey(), s.len()), (0x100a, 5, 20));
        assert_eq!(r.slice(..).unwrap(), r);
        assert_eq!(r.slice(90..).unwrap().len(), 10);
        assert_eq!(r.slice(..=99).unwrap().len(), 100);
        assert!(r.slice(..=100).is_err());
        assert!(r.slice(50..101).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = r.slice(60..50);
        assert!(backwards.is_err());
        assert!(s.slice(0..21).is_err(), "a slice of a slice");
        assert!(RemoteBuf::new(u64::MAX, 1, 2).is_none());
    }
}
