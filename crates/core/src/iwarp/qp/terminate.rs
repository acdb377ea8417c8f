//! Ending the stream: RFC 5040 section 7's codes, and the TERMINATE this side sends.

use super::{untagged, Qp, State};
use crate::iwarp::stream::write_fpdu;
use oxrdma_wire::iwarp::ddp::{DdpRepr, Queue, RdmapOpcode, TerminateRepr};
use oxrdma_wire::iwarp::mpa;

/// RFC 5040 section 7's layers, and the codes this QP reports.
pub(super) mod term {
    pub const RDMAP: u8 = 0;
    pub const DDP: u8 = 1;
    pub const LLP: u8 = 2;
    // RDMAP error types and codes.
    pub const LOCAL: u8 = 0;
    pub const REMOTE_PROTECTION: u8 = 1;
    pub const REMOTE_OPERATION: u8 = 2;
    pub const INVALID_STAG: u8 = 0x00;
    pub const BOUNDS: u8 = 0x01;
    pub const ACCESS: u8 = 0x02;
    pub const UNEXPECTED_OPCODE: u8 = 0x06;
    pub const CANNOT_INVALIDATE: u8 = 0x09;
    // DDP error types and codes.
    pub const TAGGED: u8 = 1;
    pub const UNTAGGED: u8 = 2;
    pub const T_INVALID_STAG: u8 = 0x00;
    pub const T_BOUNDS: u8 = 0x01;
    pub const U_INVALID_QN: u8 = 0x01;
    pub const U_NO_BUFFER: u8 = 0x02;
    pub const U_MSN_RANGE: u8 = 0x03;
    pub const U_TOO_LONG: u8 = 0x05;
    // LLP (MPA) codes.
    pub const MPA_CRC: u8 = 0x02;
    pub const MPA_LENGTH: u8 = 0x03;
}

impl Qp {
    /// Ends the stream from this side: a TERMINATE is the last thing sent, and every WR
    /// flushes. Where a received segment is at fault (`offending`: its DDP header and
    /// the segment's length), the TERMINATE carries both: the length's two bytes, then the
    /// header (M and D set together, the layout siw sends and Wireshark reads).
    pub(super) fn terminate(
        &mut self,
        layer: u8,
        etype: u8,
        ecode: u8,
        offending: Option<(DdpRepr, usize)>,
    ) {
        let t = TerminateRepr {
            layer,
            etype,
            ecode,
            ddp_length: offending.is_some(),
            ddp_header: offending.is_some(),
            rdmap_header: false,
        };
        let mut body = vec![0u8; TerminateRepr::LEN + 2 + 18];
        let mut len = TerminateRepr::LEN;
        // The control word, the length and a DDP header fit the body.
        let _ = t.emit(&mut body);
        if let Some((h, seg_len)) = offending {
            let seg_len = u16::try_from(seg_len).unwrap_or(u16::MAX);
            body[len..len + 2].copy_from_slice(&seg_len.to_be_bytes());
            len += 2;
            len += h.emit(&mut body[len..]).unwrap_or(0);
        }
        let header = DdpRepr {
            last: true,
            opcode: RdmapOpcode::Terminate,
            placement: untagged(Queue::Terminate, 1, 0),
        };
        let mut fpdu = vec![0u8; mpa::fpdu_len(18 + len, self.cfg.crc)];
        if let Ok(n) = write_fpdu(&mut fpdu, &header, &body[..len], self.cfg.crc) {
            fpdu.truncate(n);
            self.terminate_out = Some(fpdu);
        }
        self.count_refusal(layer, etype, ecode);
        self.flush(true);
        self.state = State::Terminated {
            sent: Some(t),
            received: None,
        };
    }

    /// Counts a TERMINATE this side sends, and what it refused under the responder's
    /// names where the cause is the same as RoCE's (a bad key, bounds, rights).
    fn count_refusal(&mut self, layer: u8, etype: u8, ecode: u8) {
        use crate::Counter::*;
        self.counts.bump(IwarpTerminateSent);
        let cause = match (layer, etype, ecode) {
            (term::DDP, term::TAGGED, term::T_INVALID_STAG)
            | (term::RDMAP, term::REMOTE_PROTECTION, term::INVALID_STAG) => Some(BadRkey),
            (term::DDP, term::TAGGED, term::T_BOUNDS)
            | (term::RDMAP, term::REMOTE_PROTECTION, term::BOUNDS) => Some(OutOfBounds),
            (term::RDMAP, term::REMOTE_PROTECTION, term::ACCESS) => Some(AccessDenied),
            (term::LLP, _, term::MPA_CRC) => Some(IwarpCrcErr),
            (term::LLP, _, _) => Some(IwarpMalformed),
            _ => None,
        };
        if let Some(c) = cause {
            self.counts.bump(c);
            if matches!(c, BadRkey | OutOfBounds | AccessDenied) {
                self.counts.bump(RespRemoteAccessErrors);
            }
        }
    }
}
