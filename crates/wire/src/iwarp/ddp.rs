//! The DDP header (RFC 5041) with the RDMAP control byte it carries (RFC 5040), and the
//! RDMAP bodies that follow some of them.
//!
//! Two bytes of control (DDP: Tagged, Last, version 1; RDMAP: version 1, opcode), then a
//! tagged segment's STag and 64-bit offset (RDMA WRITE, READ response: placed straight
//! into the buffer the STag names), or an untagged segment's 32 bits for the ULP (the
//! STag a SEND with Invalidate invalidates), queue number, message sequence number and
//! 32-bit offset (SEND on queue 0, READ request on 1, TERMINATE on 2).

use crate::error::{need, room, Result, WireError};
use crate::field::{set_u32, set_u64, u32_at, u64_at};

const TAGGED: u8 = 0x80;
const LAST: u8 = 0x40;
const DDP_VERSION: u8 = 1;
const RDMAP_VERSION: u8 = 1;

/// Bytes of a tagged segment's DDP header (control included).
pub const TAGGED_LEN: usize = 14;
/// Bytes of an untagged segment's DDP header (control included).
pub const UNTAGGED_LEN: usize = 18;

/// RDMAP's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RdmapOpcode {
    /// RDMA WRITE (tagged).
    Write = 0,
    /// RDMA READ request (untagged, queue 1).
    ReadRequest = 1,
    /// RDMA READ response (tagged, into the requester's sink buffer).
    ReadResponse = 2,
    /// SEND (untagged, queue 0).
    Send = 3,
    /// SEND that invalidates the STag in the header's ULP field.
    SendInvalidate = 4,
    /// SEND with solicited event.
    SendSe = 5,
    /// SEND with solicited event that invalidates an STag.
    SendSeInvalidate = 6,
    /// TERMINATE (untagged, queue 2): the stream ends in error.
    Terminate = 7,
}

impl RdmapOpcode {
    /// The opcode of a 4-bit field; 8-15 are reserved.
    pub fn from_bits(b: u8) -> Option<Self> {
        use RdmapOpcode::*;
        Some(match b {
            0 => Write,
            1 => ReadRequest,
            2 => ReadResponse,
            3 => Send,
            4 => SendInvalidate,
            5 => SendSe,
            6 => SendSeInvalidate,
            7 => Terminate,
            _ => return None,
        })
    }

    /// Whether its segments are tagged (placed by STag and offset).
    pub fn tagged(self) -> bool {
        matches!(self, RdmapOpcode::Write | RdmapOpcode::ReadResponse)
    }

    /// Whether it is a SEND that invalidates the STag its header names.
    pub fn invalidates(self) -> bool {
        matches!(
            self,
            RdmapOpcode::SendInvalidate | RdmapOpcode::SendSeInvalidate
        )
    }

    /// The untagged queue its segments go to (none for tagged ones).
    pub fn queue(self) -> Option<Queue> {
        use RdmapOpcode::*;
        match self {
            Write | ReadResponse => None,
            ReadRequest => Some(Queue::ReadRequest),
            Terminate => Some(Queue::Terminate),
            Send | SendInvalidate | SendSe | SendSeInvalidate => Some(Queue::Send),
        }
    }
}

/// The untagged queues RDMAP uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Queue {
    /// SENDs, into posted receives.
    Send = 0,
    /// RDMA READ requests.
    ReadRequest = 1,
    /// TERMINATE messages.
    Terminate = 2,
}

/// Where a segment's payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Into the buffer `stag` names, at byte `offset` of it.
    Tagged {
        /// The steering tag of the sink buffer.
        stag: u32,
        /// The tagged offset (the buffer's address space).
        offset: u64,
    },
    /// Into the next message of `queue`, at byte `offset` of message `msn`.
    Untagged {
        /// For the ULP: the STag a SEND with Invalidate invalidates (else 0).
        ulp: u32,
        /// The queue (by opcode: SEND 0, READ request 1, TERMINATE 2).
        queue: Queue,
        /// Message sequence number on that queue (the first message is 1).
        msn: u32,
        /// Offset of this segment in its message.
        offset: u32,
    },
}

/// A DDP segment's header and its RDMAP control, as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpRepr {
    /// L: the message's last segment.
    pub last: bool,
    /// The RDMAP message this segment belongs to.
    pub opcode: RdmapOpcode,
    /// Where its payload goes.
    pub placement: Placement,
}

impl DdpRepr {
    /// Reads the header at the start of a DDP segment (an FPDU's ULPDU); the second value
    /// is its length (the payload follows).
    pub fn parse(seg: &[u8]) -> Result<(Self, usize)> {
        need("DDP control", seg, 2)?;
        let (ddp, rdmap) = (seg[0], seg[1]);
        if ddp & 0x03 != DDP_VERSION {
            return Err(WireError::Unsupported("DDP version"));
        }
        if rdmap >> 6 != RDMAP_VERSION {
            return Err(WireError::Unsupported("RDMAP version"));
        }
        let opcode =
            RdmapOpcode::from_bits(rdmap & 0x0f).ok_or(WireError::Malformed("RDMAP opcode"))?;
        let tagged = ddp & TAGGED != 0;
        if tagged != opcode.tagged() {
            return Err(WireError::Malformed("RDMAP opcode in the wrong DDP model"));
        }
        let last = ddp & LAST != 0;
        if tagged {
            need("DDP tagged header", seg, TAGGED_LEN)?;
            let placement = Placement::Tagged {
                stag: u32_at(seg, 2),
                offset: u64_at(seg, 6),
            };
            return Ok((
                DdpRepr {
                    last,
                    opcode,
                    placement,
                },
                TAGGED_LEN,
            ));
        }
        need("DDP untagged header", seg, UNTAGGED_LEN)?;
        let queue = match u32_at(seg, 6) {
            0 => Queue::Send,
            1 => Queue::ReadRequest,
            2 => Queue::Terminate,
            _ => return Err(WireError::Malformed("DDP queue number")),
        };
        if opcode.queue() != Some(queue) {
            return Err(WireError::Malformed("RDMAP opcode on the wrong DDP queue"));
        }
        let placement = Placement::Untagged {
            ulp: u32_at(seg, 2),
            queue,
            msn: u32_at(seg, 10),
            offset: u32_at(seg, 14),
        };
        Ok((
            DdpRepr {
                last,
                opcode,
                placement,
            },
            UNTAGGED_LEN,
        ))
    }

    /// Bytes [`Self::emit`] writes.
    pub fn header_len(&self) -> usize {
        match self.placement {
            Placement::Tagged { .. } => TAGGED_LEN,
            Placement::Untagged { .. } => UNTAGGED_LEN,
        }
    }

    /// Writes the header at the start of `seg`; returns its length. A placement that does
    /// not fit the opcode is [`WireError::Malformed`].
    pub fn emit(&self, seg: &mut [u8]) -> Result<usize> {
        let len = self.header_len();
        let fits = match self.placement {
            Placement::Tagged { .. } => self.opcode.tagged(),
            Placement::Untagged { queue, .. } => self.opcode.queue() == Some(queue),
        };
        if !fits {
            return Err(WireError::Malformed("RDMAP opcode in the wrong DDP model"));
        }
        room(seg, len)?;
        let tagged = if self.opcode.tagged() { TAGGED } else { 0 };
        seg[0] = tagged | if self.last { LAST } else { 0 } | DDP_VERSION;
        seg[1] = RDMAP_VERSION << 6 | self.opcode as u8;
        match self.placement {
            Placement::Tagged { stag, offset } => {
                set_u32(seg, 2, stag);
                set_u64(seg, 6, offset);
            }
            Placement::Untagged {
                ulp,
                queue,
                msn,
                offset,
            } => {
                set_u32(seg, 2, ulp);
                set_u32(seg, 6, queue as u32);
                set_u32(seg, 10, msn);
                set_u32(seg, 14, offset);
            }
        }
        Ok(len)
    }
}

/// An RDMA READ request's body (the payload of its untagged segment): read `size` bytes
/// from the responder's `source_stag` at `source_offset` into the requester's `sink_stag`
/// at `sink_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequestRepr {
    /// The requester's buffer the READ response segments are tagged with.
    pub sink_stag: u32,
    /// Where in it the data goes.
    pub sink_offset: u64,
    /// Bytes to read.
    pub size: u32,
    /// The responder's buffer read.
    pub source_stag: u32,
    /// Where in it the data starts.
    pub source_offset: u64,
}

impl ReadRequestRepr {
    /// Bytes of the body.
    pub const LEN: usize = 28;

    /// Reads the body from a READ request's payload.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("RDMA READ request", b, Self::LEN)?;
        Ok(ReadRequestRepr {
            sink_stag: u32_at(b, 0),
            sink_offset: u64_at(b, 4),
            size: u32_at(b, 12),
            source_stag: u32_at(b, 16),
            source_offset: u64_at(b, 20),
        })
    }

    /// Writes the body at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        set_u32(b, 0, self.sink_stag);
        set_u64(b, 4, self.sink_offset);
        set_u32(b, 12, self.size);
        set_u32(b, 16, self.source_stag);
        set_u64(b, 20, self.source_offset);
        Ok(())
    }
}

/// A TERMINATE's control word: which layer found what error, and which of the
/// terminated message's headers follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateRepr {
    /// 0 RDMAP, 1 DDP, 2 the lower layer (MPA, TCP).
    pub layer: u8,
    /// The error type within that layer (4 bits).
    pub etype: u8,
    /// The error code (8 bits).
    pub ecode: u8,
    /// M: the DDP segment length of the terminated segment follows...
    pub ddp_length: bool,
    /// D: ... with its DDP header...
    pub ddp_header: bool,
    /// R: ... and its RDMAP header (a READ request's body).
    pub rdmap_header: bool,
}

impl TerminateRepr {
    /// Bytes of the control word.
    pub const LEN: usize = 4;

    /// Reads the control word from a TERMINATE's payload.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("TERMINATE control", b, Self::LEN)?;
        Ok(TerminateRepr {
            layer: b[0] >> 4,
            etype: b[0] & 0x0f,
            ecode: b[1],
            ddp_length: b[2] & 0x80 != 0,
            ddp_header: b[2] & 0x40 != 0,
            rdmap_header: b[2] & 0x20 != 0,
        })
    }

    /// Writes the control word at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if self.layer > 0x0f || self.etype > 0x0f {
            return Err(WireError::Malformed("TERMINATE layer or type over 4 bits"));
        }
        room(b, Self::LEN)?;
        b[0] = self.layer << 4 | self.etype;
        b[1] = self.ecode;
        b[2] = u8::from(self.ddp_length) << 7
            | u8::from(self.ddp_header) << 6
            | u8::from(self.rdmap_header) << 5;
        b[3] = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn write_segment_layout() {
        let h = DdpRepr {
            last: true,
            opcode: RdmapOpcode::Write,
            placement: Placement::Tagged {
                stag: 0x0102_0304,
                offset: 0x1122_3344_5566_7788,
            },
        };
        let mut b = [0u8; 14];
        assert_eq!(h.emit(&mut b).unwrap(), 14);
        assert_eq!(
            b,
            [0xc1, 0x40, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        assert_eq!(DdpRepr::parse(&b).unwrap(), (h, 14));
    }

    #[test]
    fn read_request_layout() {
        let h = DdpRepr {
            last: true,
            opcode: RdmapOpcode::ReadRequest,
            placement: Placement::Untagged {
                ulp: 0,
                queue: Queue::ReadRequest,
                msn: 7,
                offset: 0,
            },
        };
        let mut b = [0u8; 18 + 28];
        h.emit(&mut b).unwrap();
        assert_eq!(&b[..2], &[0x41, 0x41]);
        assert_eq!(&b[6..14], &[0, 0, 0, 1, 0, 0, 0, 7]);
        let r = ReadRequestRepr {
            sink_stag: 0xa,
            sink_offset: 0xb,
            size: 0xc,
            source_stag: 0xd,
            source_offset: 0xe,
        };
        r.emit(&mut b[18..]).unwrap();
        assert_eq!(b[18 + 3], 0xa);
        assert_eq!(b[18 + 11], 0xb);
        assert_eq!(b[18 + 15], 0xc);
        assert_eq!(b[18 + 19], 0xd);
        assert_eq!(b[18 + 27], 0xe);
        assert_eq!(ReadRequestRepr::parse(&b[18..]).unwrap(), r);
    }

    #[test]
    fn segments_refused() {
        // A WRITE marked untagged; a SEND on the READ queue; version 2; opcode 9.
        let mut b = [0u8; 18];
        b[..2].copy_from_slice(&[0x41, 0x40]);
        assert!(DdpRepr::parse(&b).is_err());
        b[..2].copy_from_slice(&[0x41, 0x43]);
        b[9] = 1;
        assert!(DdpRepr::parse(&b).is_err());
        b[9] = 0;
        assert!(DdpRepr::parse(&b).is_ok());
        b[0] = 0x42;
        assert_eq!(
            DdpRepr::parse(&b),
            Err(WireError::Unsupported("DDP version"))
        );
        b[..2].copy_from_slice(&[0x41, 0x49]);
        assert_eq!(
            DdpRepr::parse(&b),
            Err(WireError::Malformed("RDMAP opcode"))
        );
    }

    #[test]
    fn terminate_layout() {
        let t = TerminateRepr {
            layer: 1,
            etype: 2,
            ecode: 0x05,
            ddp_length: true,
            ddp_header: true,
            rdmap_header: false,
        };
        let mut b = [0xffu8; 4];
        t.emit(&mut b).unwrap();
        assert_eq!(b, [0x12, 0x05, 0xc0, 0]);
        assert_eq!(TerminateRepr::parse(&b).unwrap(), t);
    }

    fn any_ddp() -> impl Strategy<Value = DdpRepr> {
        (
            0u8..8,
            any::<bool>(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(op, last, a, b, c, d)| {
                let opcode = RdmapOpcode::from_bits(op).unwrap();
                let placement = match opcode.queue() {
                    None => Placement::Tagged { stag: a, offset: b },
                    Some(queue) => Placement::Untagged {
                        ulp: a,
                        queue,
                        msn: c,
                        offset: d,
                    },
                };
                DdpRepr {
                    last,
                    opcode,
                    placement,
                }
            })
    }

    proptest! {
        #[test]
        fn headers_round_trip(h in any_ddp()) {
            let mut b = [0u8; 18];
            let n = h.emit(&mut b).unwrap();
            prop_assert_eq!(DdpRepr::parse(&b[..n]).unwrap(), (h, n));
        }

        #[test]
        fn any_bytes_parse_or_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = DdpRepr::parse(&b);
            let _ = ReadRequestRepr::parse(&b);
            let _ = TerminateRepr::parse(&b);
        }
    }
}
