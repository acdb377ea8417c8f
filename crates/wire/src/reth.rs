//! RDMA Extended Transport Header (16 bytes): virtual address, rkey, DMA length. Carried by
//! WRITE FIRST/ONLY, READ REQUEST, FLUSH and ATOMIC_WRITE.

use crate::field::{fixed, fixed_mut, header_view, set_u32, set_u64, u32_at, u64_at};

header_view!(
    /// Zero-copy view of a RETH.
    Reth, 16, "RETH"
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address (VA), 64 bits, where the remote access starts.
    pub fn virtual_address(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    /// Remote key (R_Key) of the target region.
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), 8)
    }
    /// DMA length: bytes of the whole message (WRITE, READ) or range (FLUSH).
    pub fn dma_length(&self) -> u32 {
        u32_at(self.b(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Writes the 64-bit virtual address.
    pub fn set_virtual_address(&mut self, va: u64) {
        set_u64(self.m(), 0, va);
    }
    /// Writes the R_Key.
    pub fn set_rkey(&mut self, rkey: u32) {
        set_u32(self.m(), 8, rkey);
    }
    /// Writes the DMA length.
    pub fn set_dma_length(&mut self, len: u32) {
        set_u32(self.m(), 12, len);
    }
}

/// A RETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethRepr {
    /// Virtual address (VA), 64 bits, where the remote access starts.
    pub virtual_address: u64,
    /// Remote key (R_Key) of the target region.
    pub rkey: u32,
    /// Length of the whole message (WRITE, READ) in bytes.
    pub dma_length: u32,
}

impl RethRepr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> Self {
        // One length check for the header, not one per field.
        let h = Reth::new_unchecked(fixed::<{ Reth::<&[u8]>::LEN }>(h.b()));
        RethRepr {
            virtual_address: h.virtual_address(),
            rkey: h.rkey(),
            dma_length: h.dma_length(),
        }
    }
    /// Writes this RETH into `h`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        // One length check for the header, not one per field.
        let mut h = Reth::new_unchecked(fixed_mut::<{ Reth::<&[u8]>::LEN }>(h.m()));
        h.set_virtual_address(self.virtual_address);
        h.set_rkey(self.rkey);
        h.set_dma_length(self.dma_length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets() {
        let r = RethRepr {
            virtual_address: 0x0102_0304_0506_0708,
            rkey: 0x1112_1314,
            dma_length: 0x2122_2324,
        };
        let mut b = [0u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut b[..]));
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x23, 0x24]
        );
        assert_eq!(RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()), r);
        assert!(Reth::new_checked(&b[..15]).is_err());
    }
}
