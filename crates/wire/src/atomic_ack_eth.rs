//! Atomic Acknowledge Extended Transport Header (8 bytes): the value the target held before
//! the atomic operation.

use crate::field::{header_view, set_u64, u64_at};

header_view!(
    /// Zero-copy view of an AtomicAckETH.
    AtomicAckEth, 8, "AtomicAckETH"
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// Original Remote Data: the 64-bit value at the target address before the atomic operation.
    pub fn original(&self) -> u64 {
        u64_at(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Writes the Original Remote Data.
    pub fn set_original(&mut self, v: u64) {
        set_u64(self.m(), 0, v);
    }
}

/// An AtomicAckETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEthRepr {
    /// Original Remote Data: the 64-bit value the target held before the atomic operation.
    pub original: u64,
}

impl AtomicAckEthRepr {
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> Self {
        AtomicAckEthRepr {
            original: h.original(),
        }
    }
    /// Writes this AtomicAckETH into `h`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_original(self.original);
    }
}
