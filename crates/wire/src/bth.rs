//! Base Transport Header (12 bytes), present in every RoCEv2 packet.
//!
//! ```text
//!  0: opcode | 1: SE M Pad(2) TVer(4) | 2-3: P_Key
//!  4: FECN BECN resv6 | 5-7: destination QP
//!  8: AckReq resv7 | 9-11: PSN
//! ```
//!
//! oxrdma gives the top bit of resv7 a meaning between its own peers (selective repeat,
//! see [`BthRepr::selective_repeat`]); other implementations send it as zero and ignore it.

use crate::error::{need, Result, WireError};
use crate::field::{fixed, fixed_mut, set_u16, set_u24, u16_at, u24_at};
use crate::opcode::Opcode;
use crate::psn::Psn;

/// Byte 8's selective-repeat bit.
const SELECTIVE_REPEAT_BIT: u8 = 0x40;

/// Zero-copy view of a BTH.
#[derive(Debug, Clone, Copy)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Header length in bytes.
    pub const LEN: usize = 12;

    /// Wraps `buffer`; accessors panic if it is shorter than [`Self::LEN`].
    pub fn new_unchecked(buffer: T) -> Self {
        Bth { buffer }
    }
    /// Wraps `buffer` after checking its length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        need("BTH", buffer.as_ref(), Self::LEN)?;
        Ok(Bth { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The OpCode (byte 0): transport service and operation.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[0])
    }
    /// Solicited Event (SE): the receiver should raise a completion event for this message.
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }
    /// Migration request (MigReq), used by automatic path migration.
    pub fn migreq(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }
    /// Pad Count (2 bits): bytes added after the payload to reach a multiple of 4.
    pub fn pad_count(&self) -> u8 {
        (self.b()[1] >> 4) & 0x3
    }
    /// Transport header version (TVer, 4 bits); 0 is the only one defined.
    pub fn transport_version(&self) -> u8 {
        self.b()[1] & 0x0f
    }
    /// Partition key (P_Key).
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// Forward explicit congestion notification (FECN).
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }
    /// Backward explicit congestion notification (BECN).
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }
    /// Destination queue pair number (DestQP), 24 bits.
    pub fn dest_qpn(&self) -> u32 {
        u24_at(self.b(), 5)
    }
    /// Acknowledge request (AckReq): the responder should acknowledge this packet.
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }
    /// The selective-repeat bit (the top bit of resv7).
    pub fn selective_repeat(&self) -> bool {
        self.b()[8] & SELECTIVE_REPEAT_BIT != 0
    }
    /// Packet sequence number (PSN), 24 bits.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), 9))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Writes the OpCode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.m()[0] = op.0;
    }
    /// Sets SE, MigReq, pad count and TVer (byte 1) in one go.
    pub fn set_flags(&mut self, solicited: bool, migreq: bool, pad: u8, tver: u8) {
        self.m()[1] =
            (u8::from(solicited) << 7) | (u8::from(migreq) << 6) | ((pad & 3) << 4) | (tver & 0xf);
    }
    /// Sets the Pad Count (2 bits), leaving the rest of byte 1.
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = self.m();
        b[1] = (b[1] & !0x30) | ((pad & 3) << 4);
    }
    /// Writes the P_Key.
    pub fn set_pkey(&mut self, pkey: u16) {
        set_u16(self.m(), 2, pkey);
    }
    /// Sets FECN and BECN; the six reserved bits become zero.
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.m()[4] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    /// Writes the 24-bit destination QP; bits above the low 24 are dropped.
    pub fn set_dest_qpn(&mut self, qpn: u32) {
        set_u24(self.m(), 5, qpn);
    }
    /// Sets AckReq; the seven reserved bits become zero.
    pub fn set_ack_req(&mut self, ack_req: bool) {
        self.m()[8] = u8::from(ack_req) << 7;
    }
    /// Sets or clears the selective-repeat bit, leaving AckReq.
    pub fn set_selective_repeat(&mut self, on: bool) {
        let b = self.m();
        b[8] = (b[8] & !SELECTIVE_REPEAT_BIT) | if on { SELECTIVE_REPEAT_BIT } else { 0 };
    }
    /// Writes the 24-bit PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        set_u24(self.m(), 9, psn.value());
    }
}

/// A BTH as plain values. The pad count is not here: it follows from the payload length, and
/// [`crate::PacketRepr`] writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// The OpCode: transport service and operation.
    pub opcode: Opcode,
    /// Solicited Event (SE).
    pub solicited: bool,
    /// Migration request (MigReq).
    pub migreq: bool,
    /// Partition key (P_Key).
    pub pkey: u16,
    /// Forward explicit congestion notification (FECN).
    pub fecn: bool,
    /// Backward explicit congestion notification (BECN).
    pub becn: bool,
    /// 24-bit destination queue pair number.
    pub dest_qpn: u32,
    /// Acknowledge request (AckReq).
    pub ack_req: bool,
    /// Packet sequence number (PSN), 24 bits.
    pub psn: Psn,
    /// oxrdma's selective repeat (a reserved bit to everyone else). On a request: the
    /// requester takes SACKs and resends only what they show missing, so the responder may
    /// keep packets that arrive ahead of a gap. On an ACK: the responder keeps such packets
    /// for this QP, and the ACK's payload lists them ([`crate::sack`]).
    pub selective_repeat: bool,
}

impl BthRepr {
    /// Reads a BTH, rejecting transport versions other than 0.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self> {
        // One length check for the header, not one per field.
        let bth = Bth::new_unchecked(fixed::<{ Bth::<&[u8]>::LEN }>(bth.b()));
        if bth.transport_version() != 0 {
            return Err(WireError::BadTransportVersion(bth.transport_version()));
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            migreq: bth.migreq(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qpn: bth.dest_qpn(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
            selective_repeat: bth.selective_repeat(),
        })
    }

    /// Writes the header with pad count 0 and the other reserved bits 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        // One length check for the header, not one per field.
        let mut bth = Bth::new_unchecked(fixed_mut::<{ Bth::<&[u8]>::LEN }>(bth.m()));
        bth.set_opcode(self.opcode);
        bth.set_flags(self.solicited, self.migreq, 0, 0);
        bth.set_pkey(self.pkey);
        bth.set_ecn(self.fecn, self.becn);
        bth.set_dest_qpn(self.dest_qpn & 0x00ff_ffff);
        bth.set_ack_req(self.ack_req);
        bth.set_selective_repeat(self.selective_repeat);
        bth.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // First packet of rc_pingpong.pcap: RC_SEND_FIRST, dqp 0x11, PSN 9394818.
    const SEND_FIRST: [u8; 12] = [0x00, 0x00, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0x8f, 0x5a, 0x82];

    #[test]
    fn parses_a_real_header() {
        let r = BthRepr::parse(&Bth::new_checked(&SEND_FIRST[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::RC_SEND_FIRST);
        assert_eq!(r.pkey, 0xffff);
        assert_eq!(r.dest_qpn, 0x11);
        assert_eq!(r.psn, Psn::new(9_394_818));
        assert!(!r.ack_req && !r.solicited && !r.migreq);
        let mut out = [0u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(out, SEND_FIRST);
    }

    #[test]
    fn rejects_short_and_bad_version() {
        assert!(matches!(
            Bth::new_checked(&SEND_FIRST[..11]),
            Err(WireError::Truncated {
                needed: 12,
                available: 11,
                ..
            })
        ));
        let mut b = SEND_FIRST;
        b[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&b[..])),
            Err(WireError::BadTransportVersion(1))
        );
    }

    #[test]
    fn flag_bits_land_where_the_spec_puts_them() {
        let mut b = [0u8; 12];
        let mut v = Bth::new_unchecked(&mut b[..]);
        v.set_flags(true, true, 3, 0);
        v.set_ecn(true, false);
        v.set_ack_req(true);
        assert_eq!((b[1], b[4], b[8]), (0xf0, 0x80, 0x80));
    }
}
