//! Atomic Extended Transport Header (28 bytes): address, rkey, swap (or add) and compare
//! operands of COMPARE_SWAP and FETCH_ADD.

use crate::field::{header_view, set_u32, set_u64, u32_at, u64_at};

header_view!(
    /// Zero-copy view of an AtomicETH.
    AtomicEth, 28, "AtomicETH"
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (VA), 64 bits, of the 8-byte target in the responder's memory.
    pub fn virtual_address(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    /// Remote key (R_Key) of the memory region holding the target.
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), 8)
    }
    /// The swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.b(), 12)
    }
    /// The compare operand of COMPARE_SWAP (ignored by FETCH_ADD).
    pub fn compare(&self) -> u64 {
        u64_at(self.b(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Writes the 64-bit virtual address.
    pub fn set_virtual_address(&mut self, va: u64) {
        set_u64(self.m(), 0, va);
    }
    /// Writes the R_Key.
    pub fn set_rkey(&mut self, rkey: u32) {
        set_u32(self.m(), 8, rkey);
    }
    /// Writes the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.m(), 12, v);
    }
    /// Writes the compare operand.
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.m(), 20, v);
    }
}

/// An AtomicETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEthRepr {
    /// Virtual address (VA), 64 bits, of the 8-byte target in the responder's memory.
    pub virtual_address: u64,
    /// Remote key (R_Key) of the memory region holding the target.
    pub rkey: u32,
    /// The swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
    pub swap_add: u64,
    /// The compare operand of COMPARE_SWAP (ignored by FETCH_ADD).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Self {
        AtomicEthRepr {
            virtual_address: h.virtual_address(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        }
    }
    /// Writes this AtomicETH into `h`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_virtual_address(self.virtual_address);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_follows_swap() {
        let r = AtomicEthRepr {
            virtual_address: 8,
            rkey: 0xabcd,
            swap_add: 1,
            compare: 2,
        };
        let mut b = [0u8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut b[..]));
        assert_eq!(b[19], 1);
        assert_eq!(b[27], 2);
        assert_eq!(
            AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()),
            r
        );
    }
}
