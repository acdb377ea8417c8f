//! ACK Extended Transport Header (4 bytes): syndrome and 24-bit MSN. The syndrome says ACK
//! (with a credit count), RNR NAK (with a timer code) or NAK (with an error code).

use crate::error::{Result, WireError};
use crate::field::{header_view, set_u24, u24_at};

header_view!(
    /// Zero-copy view of an AETH.
    Aeth, 4, "AETH"
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte (bits 31..24): ACK type in bits 6..5 and a 5-bit value below.
    pub fn syndrome(&self) -> u8 {
        self.b()[0]
    }
    /// Message sequence number (MSN), 24 bits: the last message the responder has completed.
    pub fn msn(&self) -> u32 {
        u24_at(self.b(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Writes the raw syndrome byte.
    pub fn set_syndrome(&mut self, s: u8) {
        self.m()[0] = s;
    }
    /// Writes the MSN; bits above the low 24 are dropped.
    pub fn set_msn(&mut self, msn: u32) {
        set_u24(self.m(), 1, msn);
    }
}

/// The credit value meaning "no credit count" (end-to-end flow control unused). Linux rxe
/// sends it on every ACK.
pub const INVALID_CREDIT: u8 = 0x1f;

/// NAK error codes (syndrome type 0b11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// The responder expected another PSN; it carries the expected one.
    PsnSequenceError,
    /// Invalid Request (code 1): the request was malformed or unsupported by the responder.
    InvalidRequest,
    /// Remote Access Error (code 2): R_Key, address, length or access rights failed the check.
    RemoteAccessError,
    /// Remote Operational Error (code 3): the responder could not complete the request.
    RemoteOperationalError,
    /// Invalid RD Request (code 4), defined for Reliable Datagram.
    InvalidRdRequest,
    /// A code the spec reserves (5..=31); kept so re-emission is exact.
    Reserved(u8),
}

impl NakCode {
    /// Decodes the low 5 bits of a NAK syndrome; codes 5..=31 become [`NakCode::Reserved`].
    pub fn from_code(code: u8) -> Self {
        match code & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
    /// The 5-bit NAK code carried in the syndrome's low bits.
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a 5-bit credit count ([`INVALID_CREDIT`] = none).
    Ack {
        /// Credit count (5 bits): receive WQEs the responder has available, in the IBA encoding.
        credits: u8,
    },
    /// Receiver not ready; retry after the time named by the 5-bit timer code.
    RnrNak {
        /// The 5-bit RNR NAK timer code; [`rnr_timer_micros`] converts it.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// Decodes a syndrome byte; the reserved type 0b10 and a set top bit are errors.
    pub fn from_byte(s: u8) -> Result<Self> {
        if s & 0x80 != 0 {
            return Err(WireError::ReservedSyndrome(s));
        }
        let value = s & 0x1f;
        match (s >> 5) & 3 {
            0 => Ok(Syndrome::Ack { credits: value }),
            1 => Ok(Syndrome::RnrNak { timer: value }),
            3 => Ok(Syndrome::Nak(NakCode::from_code(value))),
            _ => Err(WireError::ReservedSyndrome(s)),
        }
    }
    /// Encodes the syndrome byte: type 0b00 ACK, 0b01 RNR NAK, 0b11 NAK, value in the low 5 bits.
    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | code.code(),
        }
    }
}

/// An AETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// The decoded syndrome: ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// 24-bit message sequence number: messages the responder has completed.
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH, rejecting a reserved syndrome.
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> Result<Self> {
        Ok(AethRepr {
            syndrome: Syndrome::from_byte(h.syndrome())?,
            msn: h.msn(),
        })
    }
    /// Writes this AETH into `h`, masking the MSN to 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) {
        h.set_syndrome(self.syndrome.to_byte());
        h.set_msn(self.msn & 0x00ff_ffff);
    }
}

/// RNR NAK timer codes to microseconds (IBTA table "Encoding for RNR NAK Timer Field").
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// How long a requester waits after an RNR NAK with this timer code, in microseconds.
pub fn rnr_timer_micros(code: u8) -> u32 {
    RNR_TIMER_US[usize::from(code & 0x1f)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_seen_from_rxe() {
        // 0x1f: ACK, invalid credit; 0x60: NAK PSN sequence error; 0x2c: RNR NAK timer 12.
        assert_eq!(
            Syndrome::from_byte(0x1f),
            Ok(Syndrome::Ack {
                credits: INVALID_CREDIT
            })
        );
        assert_eq!(
            Syndrome::from_byte(0x60),
            Ok(Syndrome::Nak(NakCode::PsnSequenceError))
        );
        assert_eq!(
            Syndrome::from_byte(0x2c),
            Ok(Syndrome::RnrNak { timer: 12 })
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Ok(Syndrome::Nak(NakCode::RemoteAccessError))
        );
        assert_eq!(rnr_timer_micros(12), 640);
        assert_eq!(rnr_timer_micros(0), 655_360);
    }

    #[test]
    fn every_valid_byte_round_trips_and_reserved_ones_fail() {
        for b in 0..=u8::MAX {
            match Syndrome::from_byte(b) {
                Ok(s) => assert_eq!(s.to_byte(), b),
                Err(e) => {
                    assert_eq!(e, WireError::ReservedSyndrome(b));
                    assert!(b & 0x80 != 0 || (b >> 5) & 3 == 2);
                }
            }
        }
    }

    #[test]
    fn msn_is_24_bit() {
        let mut b = [0u8; 4];
        AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 0x0123_4567,
        }
        .emit(&mut Aeth::new_unchecked(&mut b[..]));
        assert_eq!(b, [0x1f, 0x23, 0x45, 0x67]);
    }
}
