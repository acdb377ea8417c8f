//! Immediate Data (4 bytes), delivered verbatim to the receiver's work completion.

use crate::field::{header_view, set_u32, u32_at};

header_view!(
    /// Zero-copy view of an ImmDt header.
    ImmDt, 4, "ImmDt"
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The four bytes read as a big-endian number. libibverbs' `imm_data` is these same bytes
    /// (a `__be32`), so `imm_data == value.to_be()` on a little-endian host.
    pub fn value(&self) -> u32 {
        u32_at(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Writes the immediate data as a big-endian number (see [`ImmDt::value`]).
    pub fn set_value(&mut self, v: u32) {
        set_u32(self.m(), 0, v);
    }
}
