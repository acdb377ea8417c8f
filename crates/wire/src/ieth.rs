//! Invalidate Extended Transport Header (4 bytes): the rkey SEND_WITH_INVALIDATE invalidates.

use crate::field::{header_view, set_u32, u32_at};

header_view!(
    /// Zero-copy view of an IETH.
    Ieth, 4, "IETH"
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// Remote key (R_Key) the responder invalidates when the SEND completes.
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Writes the R_Key to invalidate.
    pub fn set_rkey(&mut self, rkey: u32) {
        set_u32(self.m(), 0, rkey);
    }
}
