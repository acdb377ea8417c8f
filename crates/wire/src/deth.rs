//! Datagram Extended Transport Header (8 bytes): Q_Key and source QP of a UD packet.

use crate::field::{header_view, set_u24, set_u32, u24_at, u32_at};

header_view!(
    /// Zero-copy view of a DETH.
    Deth, 8, "DETH"
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key (Q_Key) the destination QP checks before accepting the datagram.
    pub fn qkey(&self) -> u32 {
        u32_at(self.b(), 0)
    }
    /// Source queue pair number (SrcQP), 24 bits.
    pub fn src_qpn(&self) -> u32 {
        u24_at(self.b(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Writes the Q_Key.
    pub fn set_qkey(&mut self, qkey: u32) {
        set_u32(self.m(), 0, qkey);
    }
    /// Sets the source QPN; the reserved byte before it becomes zero.
    pub fn set_src_qpn(&mut self, qpn: u32) {
        self.m()[4] = 0;
        set_u24(self.m(), 5, qpn);
    }
}

/// A DETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethRepr {
    /// Queue key (Q_Key) the destination QP checks before accepting the datagram.
    pub qkey: u32,
    /// 24-bit source queue pair number.
    pub src_qpn: u32,
}

impl DethRepr {
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> Self {
        DethRepr {
            qkey: h.qkey(),
            src_qpn: h.src_qpn(),
        }
    }
    /// Writes this DETH into `h`, masking the source QPN to 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set_qkey(self.qkey);
        h.set_src_qpn(self.src_qpn & 0x00ff_ffff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_mad_deth() {
        // Every CM MAD in the captures: Q_Key 0x80010000, source QP 1.
        let b = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];
        let r = DethRepr::parse(&Deth::new_checked(&b[..]).unwrap());
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x8001_0000,
                src_qpn: 1
            }
        );
        let mut out = [0xffu8; 8];
        r.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }
}
