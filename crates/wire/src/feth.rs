//! FLUSH Extended Transport Header (4 bytes, IBA 1.5): placement type and selectivity level
//! of an RC FLUSH.

use crate::field::{header_view, set_u32, u32_at};

header_view!(
    /// Zero-copy view of a FETH.
    Feth, 4, "FETH"
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// Bits 3:0: which persistence domain (1 = global visibility, 2 = persistence).
    pub fn placement_type(&self) -> u8 {
        (u32_at(self.b(), 0) & 0xf) as u8
    }
    /// Bits 5:4: 0 = the whole memory region, 1 = the given range.
    pub fn selectivity_level(&self) -> u8 {
        ((u32_at(self.b(), 0) >> 4) & 0x3) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets both fields; the reserved bits become zero.
    pub fn set_fields(&mut self, placement_type: u8, selectivity_level: u8) {
        let v = u32::from(placement_type & 0xf) | (u32::from(selectivity_level & 0x3) << 4);
        set_u32(self.m(), 0, v);
    }
}

/// A FETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FethRepr {
    /// Placement Type (4 bits): 1 = global visibility, 2 = persistence.
    pub placement_type: u8,
    /// Selectivity Level (2 bits): 0 = the whole memory region, 1 = the range the RETH gives.
    pub selectivity_level: u8,
}

impl FethRepr {
    /// Reads a FETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Feth<T>) -> Self {
        FethRepr {
            placement_type: h.placement_type(),
            selectivity_level: h.selectivity_level(),
        }
    }
    /// Writes this FETH into `h`, reserved bits zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Feth<T>) {
        h.set_fields(self.placement_type, self.selectivity_level);
    }
}
