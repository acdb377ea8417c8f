//! MPA (RFC 5044) with RFC 6581's enhanced connection setup: the request and reply frames
//! each side sends first on the TCP stream, then the FPDUs that carry one DDP segment
//! each.
//!
//! An MPA request or reply: a 16-byte key, a flags byte (M: markers wanted, C: CRC
//! wanted, R: rejected, and RFC 6581's enhanced setup), the revision, a 16-bit length and
//! up to 512 bytes of private data. A revision 2 frame with the enhanced flag begins its
//! private data with four bytes of IRD and ORD and the peer-to-peer flags (RFC 6581);
//! without the flag (a revision 2 peer that does not ask for it) it does not. An FPDU: ULPDU_Length (16 bits), the DDP segment, 0-3
//! zero bytes to a multiple of four, and a CRC32c of all that if either side asked for
//! CRCs.

use crate::error::{need, room, Result, WireError};
use crate::field::{set_u16, u16_at};

/// The key that opens an MPA request.
pub const REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// The key that opens an MPA reply.
pub const REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// Bytes of a request or reply before its private data.
pub const FRAME_HEADER_LEN: usize = 20;
/// The most private data a request or reply carries.
pub const MAX_PRIVATE_DATA: usize = 512;
/// Bytes of ULPDU_Length ahead of each DDP segment.
pub const FPDU_HEADER_LEN: usize = 2;
/// Bytes of the CRC32c that ends an FPDU where CRCs were agreed.
pub const CRC_LEN: usize = 4;

const FLAG_MARKERS: u8 = 0x80;
const FLAG_CRC: u8 = 0x40;
const FLAG_REJECT: u8 = 0x20;
/// RFC 6581's enhanced connection setup (Linux's `MPA_RR_FLAG_ENHANCED`; siw and cxgb4
/// read the IRD/ORD bytes only where it is set, and answer without them otherwise).
const FLAG_ENHANCED: u8 = 0x10;

/// Which of the two frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// The initiator's, sent when the TCP connection is up.
    Request,
    /// The responder's answer: accepted, or rejected with the R flag.
    Reply,
}

/// An MPA request or reply as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpaFrameRepr<'a> {
    /// Request or reply (by its key).
    pub kind: FrameKind,
    /// M: the sender wants markers in what it receives.
    pub markers: bool,
    /// C: the sender wants CRCs (if either side does, both send them).
    pub crc: bool,
    /// R (replies only): the connection is refused.
    pub rejected: bool,
    /// 1 (RFC 5044) or 2 (RFC 6581).
    pub revision: u8,
    /// The private data starts with [`EnhancedRepr`] (revision 2 only).
    pub enhanced: bool,
    /// What the ULP passes along (the RDMA CM's private data), at most 512 bytes.
    pub private_data: &'a [u8],
}

impl<'a> MpaFrameRepr<'a> {
    /// Reads a whole frame from the start of `buf`; the second value is its length. A
    /// frame not wholly arrived yet is [`WireError::Truncated`].
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize)> {
        need("MPA frame", buf, FRAME_HEADER_LEN)?;
        let kind = match &buf[..16] {
            k if k == REQ_KEY => FrameKind::Request,
            k if k == REP_KEY => FrameKind::Reply,
            _ => return Err(WireError::Malformed("MPA key")),
        };
        let flags = buf[16];
        let revision = buf[17];
        if revision != 1 && revision != 2 {
            return Err(WireError::Unsupported("MPA revision"));
        }
        let len = usize::from(u16_at(buf, 18));
        if len > MAX_PRIVATE_DATA {
            return Err(WireError::Malformed("MPA private data over 512 bytes"));
        }
        need("MPA private data", buf, FRAME_HEADER_LEN + len)?;
        let repr = MpaFrameRepr {
            kind,
            markers: flags & FLAG_MARKERS != 0,
            crc: flags & FLAG_CRC != 0,
            rejected: flags & FLAG_REJECT != 0,
            revision,
            enhanced: revision == 2 && flags & FLAG_ENHANCED != 0,
            private_data: &buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len],
        };
        if repr.rejected && kind == FrameKind::Request {
            return Err(WireError::Malformed("MPA request with the reject flag"));
        }
        Ok((repr, FRAME_HEADER_LEN + len))
    }

    /// Bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        FRAME_HEADER_LEN + self.private_data.len()
    }

    /// Writes the frame at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        if self.private_data.len() > MAX_PRIVATE_DATA {
            return Err(WireError::Malformed("MPA private data over 512 bytes"));
        }
        room(buf, len)?;
        buf[..16].copy_from_slice(match self.kind {
            FrameKind::Request => REQ_KEY,
            FrameKind::Reply => REP_KEY,
        });
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        buf[16] = flag(self.markers, FLAG_MARKERS)
            | flag(self.crc, FLAG_CRC)
            | flag(self.rejected, FLAG_REJECT)
            | flag(self.enhanced && self.revision == 2, FLAG_ENHANCED);
        buf[17] = self.revision;
        set_u16(buf, 18, self.private_data.len() as u16);
        buf[FRAME_HEADER_LEN..len].copy_from_slice(self.private_data);
        Ok(len)
    }
}

const P2P: u16 = 0x8000;
const SEND_RTR: u16 = 0x4000;
const WRITE_RTR: u16 = 0x8000;
const READ_RTR: u16 = 0x4000;
const IRD_ORD: u16 = 0x3fff;

/// RFC 6581's first four bytes of a revision 2 frame's private data: the READs each side
/// takes and issues at once, and how a peer-to-peer initiator's first message is sent
/// (the responder may not send before it has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EnhancedRepr {
    /// Inbound RDMA READs the sender takes at once (14 bits).
    pub ird: u16,
    /// Outbound RDMA READs the sender issues at once (14 bits).
    pub ord: u16,
    /// Peer-to-peer mode: the initiator sends a ready-to-receive message first.
    pub peer_to_peer: bool,
    /// That message may be a zero-length SEND.
    pub send_rtr: bool,
    /// ... a zero-length RDMA WRITE.
    pub write_rtr: bool,
    /// ... a zero-length RDMA READ.
    pub read_rtr: bool,
}

impl EnhancedRepr {
    /// Bytes it takes at the start of the private data.
    pub const LEN: usize = 4;

    /// Reads it from the start of a revision 2 frame's private data.
    pub fn parse(pd: &[u8]) -> Result<Self> {
        need("MPA IRD/ORD", pd, Self::LEN)?;
        let (ird, ord) = (u16_at(pd, 0), u16_at(pd, 2));
        Ok(EnhancedRepr {
            ird: ird & IRD_ORD,
            ord: ord & IRD_ORD,
            peer_to_peer: ird & P2P != 0,
            send_rtr: ird & SEND_RTR != 0,
            write_rtr: ord & WRITE_RTR != 0,
            read_rtr: ord & READ_RTR != 0,
        })
    }

    /// Writes it at the start of `pd`; IRD and ORD over 14 bits are
    /// [`WireError::Malformed`].
    pub fn emit(&self, pd: &mut [u8]) -> Result<()> {
        if self.ird > IRD_ORD || self.ord > IRD_ORD {
            return Err(WireError::Malformed("MPA IRD or ORD over 14 bits"));
        }
        room(pd, Self::LEN)?;
        let flag = |on: bool, bit: u16| if on { bit } else { 0 };
        let ird = self.ird | flag(self.peer_to_peer, P2P) | flag(self.send_rtr, SEND_RTR);
        let ord = self.ord | flag(self.write_rtr, WRITE_RTR) | flag(self.read_rtr, READ_RTR);
        set_u16(pd, 0, ird);
        set_u16(pd, 2, ord);
        Ok(())
    }
}

/// Bytes of the FPDU that carries a DDP segment of `ulpdu_len` bytes: its length field,
/// the segment, pad to a multiple of four and, with `crc`, the CRC32c.
pub fn fpdu_len(ulpdu_len: usize, crc: bool) -> usize {
    ((FPDU_HEADER_LEN + ulpdu_len + 3) & !3) + if crc { CRC_LEN } else { 0 }
}

/// Completes an FPDU in place: `buf` holds the DDP segment of `ulpdu_len` bytes at
/// [`FPDU_HEADER_LEN`]; its length, pad and (with `crc`) CRC32c are written around it.
/// Returns the FPDU's length.
pub fn seal(buf: &mut [u8], ulpdu_len: usize, crc: bool) -> Result<usize> {
    let len = fpdu_len(ulpdu_len, crc);
    let Ok(field) = u16::try_from(ulpdu_len) else {
        return Err(WireError::Malformed("DDP segment over 65535 bytes"));
    };
    room(buf, len)?;
    set_u16(buf, 0, field);
    let end = len - if crc { CRC_LEN } else { 0 };
    buf[FPDU_HEADER_LEN + ulpdu_len..end].fill(0);
    if crc {
        // Least significant byte first, as iSCSI's digest: what siw and Wireshark read.
        let c = crc32c::crc32c(&buf[..end]);
        buf[end..len].copy_from_slice(&c.to_le_bytes());
    }
    Ok(len)
}

/// Reads the FPDU at the start of `stream` (no markers): the DDP segment and the FPDU's
/// length. An FPDU not wholly arrived yet is [`WireError::Truncated`] (read more and try
/// again); a CRC that does not match is [`WireError::MpaCrcMismatch`], and the stream
/// cannot go on.
pub fn parse_fpdu(stream: &[u8], crc: bool) -> Result<(&[u8], usize)> {
    need("FPDU length", stream, FPDU_HEADER_LEN)?;
    let ulpdu_len = usize::from(u16_at(stream, 0));
    let len = fpdu_len(ulpdu_len, crc);
    need("FPDU", stream, len)?;
    if crc {
        let end = len - CRC_LEN;
        let computed = crc32c::crc32c(&stream[..end]);
        let carried = u32::from_le_bytes([
            stream[end],
            stream[end + 1],
            stream[end + 2],
            stream[end + 3],
        ]);
        if computed != carried {
            return Err(WireError::MpaCrcMismatch { computed, carried });
        }
    }
    Ok((&stream[FPDU_HEADER_LEN..FPDU_HEADER_LEN + ulpdu_len], len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_layout() {
        let f = MpaFrameRepr {
            kind: FrameKind::Request,
            markers: false,
            crc: true,
            rejected: false,
            revision: 2,
            enhanced: true,
            private_data: &[0x80, 0x10, 0x40, 0x08, 0xaa],
        };
        let mut buf = [0u8; 64];
        let n = f.emit(&mut buf).unwrap();
        assert_eq!(n, 25);
        assert_eq!(&buf[..16], b"MPA ID Req Frame");
        assert_eq!(&buf[16..20], &[0x50, 2, 0, 5]);
        assert_eq!(MpaFrameRepr::parse(&buf[..n]).unwrap(), (f, n));
        let e = EnhancedRepr::parse(f.private_data).unwrap();
        assert_eq!(
            e,
            EnhancedRepr {
                ird: 16,
                ord: 8,
                peer_to_peer: true,
                send_rtr: false,
                write_rtr: false,
                read_rtr: true,
            }
        );
    }

    #[test]
    fn frames_refused() {
        let mut buf = [0u8; 20];
        buf[..16].copy_from_slice(b"MPA ID Bad Frame");
        buf[17] = 1;
        assert_eq!(
            MpaFrameRepr::parse(&buf),
            Err(WireError::Malformed("MPA key"))
        );
        buf[..16].copy_from_slice(REP_KEY);
        buf[17] = 3;
        assert_eq!(
            MpaFrameRepr::parse(&buf),
            Err(WireError::Unsupported("MPA revision"))
        );
        buf[17] = 1;
        set_u16(&mut buf, 18, 513);
        assert!(MpaFrameRepr::parse(&buf).is_err());
        set_u16(&mut buf, 18, 4);
        assert!(matches!(
            MpaFrameRepr::parse(&buf),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn fpdu_of_five_bytes() {
        let mut buf = [0xffu8; 16];
        buf[2..7].copy_from_slice(b"hello");
        assert_eq!(seal(&mut buf, 5, true).unwrap(), 12);
        assert_eq!(&buf[..8], &[0, 5, b'h', b'e', b'l', b'l', b'o', 0]);
        // CRC32c (Castagnoli, reflected, as iSCSI's) of the eight bytes before it, least
        // significant byte first (as Linux siw sends it and Wireshark checks it);
        // computed bit by bit elsewhere.
        assert_eq!(&buf[8..12], &0x483e_d79f_u32.to_le_bytes());
        assert_eq!(parse_fpdu(&buf, true).unwrap(), (&b"hello"[..], 12));
        buf[4] ^= 1;
        assert!(matches!(
            parse_fpdu(&buf, true),
            Err(WireError::MpaCrcMismatch { .. })
        ));
    }

    proptest! {
        #[test]
        fn frames_round_trip(pd in proptest::collection::vec(any::<u8>(), 0..=512),
                             req in any::<bool>(), m in any::<bool>(), c in any::<bool>(),
                             rev in 1u8..=2, h in any::<bool>()) {
            let f = MpaFrameRepr {
                kind: if req { FrameKind::Request } else { FrameKind::Reply },
                markers: m,
                crc: c,
                rejected: !req && m,
                revision: rev,
                enhanced: h && rev == 2,
                private_data: &pd,
            };
            let mut buf = vec![0u8; 600];
            let n = f.emit(&mut buf).unwrap();
            prop_assert_eq!(MpaFrameRepr::parse(&buf[..n]).unwrap(), (f, n));
        }

        #[test]
        fn fpdus_round_trip(seg in proptest::collection::vec(any::<u8>(), 0..2000),
                            crc in any::<bool>(), cut in any::<usize>()) {
            let mut buf = vec![0u8; fpdu_len(seg.len(), crc)];
            buf[2..2 + seg.len()].copy_from_slice(&seg);
            let n = seal(&mut buf, seg.len(), crc).unwrap();
            prop_assert_eq!(n % 4, 0);
            prop_assert_eq!(parse_fpdu(&buf, crc).unwrap(), (&seg[..], n));
            // Any shorter prefix of the stream asks for more.
            let short = cut % n;
            let truncated = matches!(parse_fpdu(&buf[..short], crc), Err(WireError::Truncated { .. }));
            prop_assert!(truncated);
        }

        #[test]
        fn any_bytes_parse_or_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = MpaFrameRepr::parse(&b);
            let _ = parse_fpdu(&b, true);
            let _ = parse_fpdu(&b, false);
            let _ = EnhancedRepr::parse(&b);
        }
    }
}
