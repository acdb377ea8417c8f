//! Management datagrams (MADs): the 256-byte messages general service agents exchange on
//! QP1, each a UD SEND_ONLY with Q_Key 0x80010000. A MAD is a 24-byte common header and 232
//! bytes of class data; the connection manager (class 0x07) is the class oxrdma speaks
//! (`cm.rs`).

use crate::error::{need, Result};
use crate::field::{set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};

/// Every MAD is this long.
pub const MAD_LEN: usize = 256;
/// The common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Class data after the header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// The Q_Key of QP1 (the general services QP), in the DETH of every MAD.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The management class of the communication manager.
pub const CLASS_CM: u8 = 0x07;
/// The CM's class version.
pub const CM_CLASS_VERSION: u8 = 2;
/// MAD method Send (every CM message is one).
pub const METHOD_SEND: u8 = 0x03;

/// The MAD common header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadHeader {
    /// Base Version of the MAD format (1).
    pub base_version: u8,
    /// Management Class (0x07 for the CM).
    pub mgmt_class: u8,
    /// Class Version of the management class (2 for the CM).
    pub class_version: u8,
    /// The method, with the response bit (bit 7).
    pub method: u8,
    /// Status, 16 bits (0 on a CM Send).
    pub status: u16,
    /// Class-specific field of the common header.
    pub class_specific: u16,
    /// Transaction ID (TID): ties a response to its request.
    pub transaction_id: u64,
    /// Attribute ID: which message the class data holds (see [`crate::cm::attr`]).
    pub attr_id: u16,
    /// Attribute Modifier.
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM Send MAD header for `attr_id` in transaction `tid`.
    pub fn cm(attr_id: u16, tid: u64) -> MadHeader {
        MadHeader {
            base_version: 1,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id: tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Reads the header of `mad` (at least [`MAD_HEADER_LEN`] bytes).
    pub fn parse(mad: &[u8]) -> Result<MadHeader> {
        need("MAD header", mad, MAD_HEADER_LEN)?;
        Ok(MadHeader {
            base_version: mad[0],
            mgmt_class: mad[1],
            class_version: mad[2],
            method: mad[3],
            status: u16_at(mad, 4),
            class_specific: u16_at(mad, 6),
            transaction_id: u64_at(mad, 8),
            attr_id: u16_at(mad, 16),
            attr_mod: u32_at(mad, 20),
        })
    }

    /// Writes the header into the first [`MAD_HEADER_LEN`] bytes of `mad` (the reserved
    /// bytes become zero).
    pub fn emit(&self, mad: &mut [u8]) -> Result<()> {
        need("MAD header", mad, MAD_HEADER_LEN)?;
        mad[0] = self.base_version;
        mad[1] = self.mgmt_class;
        mad[2] = self.class_version;
        mad[3] = self.method;
        set_u16(mad, 4, self.status);
        set_u16(mad, 6, self.class_specific);
        set_u64(mad, 8, self.transaction_id);
        set_u16(mad, 16, self.attr_id);
        set_u16(mad, 18, 0);
        set_u32(mad, 20, self.attr_mod);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cm_header_round_trips() {
        // rping_cm's REQ: CM Send, TID 0x000000025c1797ff, REQ (0x0010).
        let h = MadHeader::cm(0x0010, 0x0000_0002_5c17_97ff);
        let mut b = [0xffu8; MAD_HEADER_LEN];
        h.emit(&mut b).unwrap();
        assert_eq!(
            b,
            [
                1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0x5c, 0x17, 0x97, 0xff, 0, 0x10, 0, 0, 0, 0, 0,
                0
            ]
        );
        assert_eq!(MadHeader::parse(&b).unwrap(), h);
        assert!(MadHeader::parse(&b[..23]).is_err());
    }
}
