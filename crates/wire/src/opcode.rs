//! The BTH opcode table for RC, UC, UD and the RoCEv2 CNP: which extension headers follow the
//! BTH, whether a payload may follow them, and where the packet sits in its message.

use crate::error::{Result, WireError};
use core::fmt;

/// A raw BTH opcode. [`Opcode::info`] validates it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// The transport service named by the top three opcode bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected (prefix 0x00).
    Rc,
    /// Unreliable connected (prefix 0x20).
    Uc,
    /// Unreliable datagram (prefix 0x60).
    Ud,
    /// RoCEv2 congestion notification packet (opcode 0x81).
    Cnp,
}

/// What the packet does, independent of transport and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND: a message consumed by a receive WQE at the responder.
    Send,
    /// SEND with Immediate: a SEND whose last packet carries 4 bytes of immediate data.
    SendWithImm,
    /// SEND with Invalidate: a SEND whose last packet names an R_Key to invalidate.
    SendWithInv,
    /// RDMA WRITE: data placed at a remote virtual address.
    Write,
    /// RDMA WRITE with Immediate: a WRITE that also consumes a receive WQE at the end.
    WriteWithImm,
    /// RDMA READ Request: asks the responder for the bytes a RETH names.
    ReadRequest,
    /// RDMA READ Response: the data of a READ, sent by the responder.
    ReadResponse,
    /// Acknowledge: an AETH alone (ACK, RNR NAK or NAK).
    Acknowledge,
    /// ATOMIC Acknowledge: an AETH and the original remote data.
    AtomicAcknowledge,
    /// ATOMIC CmpSwap: compare a remote 8-byte word and swap it if equal.
    CompareSwap,
    /// ATOMIC FetchAdd: add to a remote 8-byte word.
    FetchAdd,
    /// FLUSH (IBA 1.5): make earlier writes to a region persistent or globally visible.
    Flush,
    /// ATOMIC WRITE (IBA 1.5): an 8-byte write performed as one access.
    AtomicWrite,
    /// RoCEv2 congestion notification.
    Cnp,
}

/// Where a packet sits in a (possibly multi-packet) message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// FIRST packet of a message of two or more packets.
    First,
    /// MIDDLE packet of a message of three or more packets.
    Middle,
    /// LAST packet of a message of two or more packets.
    Last,
    /// ONLY packet: the whole message in one packet.
    Only,
}

impl Position {
    /// FIRST or ONLY: the packet starts a message.
    pub fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// LAST or ONLY: the packet ends a message.
    pub fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The set of extension headers after the BTH. They appear in the order of the constants.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// No extension headers.
    pub const NONE: Headers = Headers(0);
    /// Datagram Extended Transport Header (8 bytes, UD).
    pub const DETH: Headers = Headers(1 << 0);
    /// FLUSH Extended Transport Header (4 bytes).
    pub const FETH: Headers = Headers(1 << 1);
    /// RDMA Extended Transport Header (16 bytes).
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic Extended Transport Header (28 bytes).
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK Extended Transport Header (4 bytes).
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic Acknowledge Extended Transport Header (8 bytes).
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate Data (4 bytes).
    pub const IMMDT: Headers = Headers(1 << 6);
    /// Invalidate Extended Transport Header (4 bytes).
    pub const IETH: Headers = Headers(1 << 7);
    /// The 16 reserved bytes of a RoCEv2 CNP.
    pub const CNP_RESERVED: Headers = Headers(1 << 8);

    /// Union of two sets.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }
    /// `self` without the headers in `other`.
    pub const fn without(self, other: Headers) -> Headers {
        Headers(self.0 & !other.0)
    }
    /// True when every header in `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 9] = [
            "DETH",
            "FETH",
            "RETH",
            "AtomicETH",
            "AETH",
            "AtomicAckETH",
            "ImmDt",
            "IETH",
            "CNP",
        ];
        let mut set = f.debug_set();
        for (i, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                set.entry(name);
            }
        }
        set.finish()
    }
}

/// What may follow the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// Nothing.
    None,
    /// 0 to 4096 bytes (one path MTU at most).
    Any,
    /// Exactly this many bytes (ATOMIC_WRITE carries 8).
    Exactly(usize),
}

/// Everything the wire needs to know about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode this entry describes.
    pub opcode: Opcode,
    /// Wireshark-style name, e.g. `RC_SEND_FIRST`.
    pub name: &'static str,
    /// Transport service: RC, UC, UD or CNP.
    pub transport: Transport,
    /// The operation, independent of transport and position.
    pub operation: Operation,
    /// Where the packet sits in its message.
    pub position: Position,
    /// The extension headers that follow the BTH.
    pub headers: Headers,
    /// What may follow the extension headers.
    pub payload: Payload,
}

/// [`Opcode::info`] of every byte.
static INFO: [Result<OpcodeInfo>; 256] = {
    let mut table = [Err(WireError::UnsupportedTransport(0)); 256];
    let mut i = 0;
    while i < 256 {
        table[i] = Opcode(i as u8).build();
        i += 1;
    }
    table
};

/// The largest payload one packet may carry (the largest IB path MTU).
pub const MAX_PAYLOAD: usize = 4096;

const H0: Headers = Headers::NONE;
const RETH: Headers = Headers::RETH;
const IMM: Headers = Headers::IMMDT;
const AETH: Headers = Headers::AETH;

const fn entry(
    name: &'static str,
    transport: Transport,
    operation: Operation,
    position: Position,
    headers: Headers,
    payload: Payload,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode: Opcode(0),
        name,
        transport,
        operation,
        position,
        headers,
        payload,
    }
}

impl Opcode {
    /// RC SEND First.
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND Middle.
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND Last.
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND Last with Immediate (ImmDt follows the BTH).
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// RC SEND Only.
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND Only with Immediate (ImmDt follows the BTH).
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// RC RDMA WRITE First (carries the RETH).
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE Middle.
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE Last.
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE Last with Immediate (ImmDt follows the BTH).
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// RC RDMA WRITE Only (carries the RETH).
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0a);
    /// RC RDMA WRITE Only with Immediate (RETH, then ImmDt).
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0b);
    /// RC RDMA READ Request (RETH, no payload).
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0c);
    /// RC RDMA READ Response First (carries an AETH).
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0d);
    /// RC RDMA READ Response Middle.
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0e);
    /// RC RDMA READ Response Last (carries an AETH).
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0f);
    /// RC RDMA READ Response Only (carries an AETH).
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC Acknowledge (AETH, no payload).
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC ATOMIC Acknowledge (AETH, then AtomicAckETH).
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// RC ATOMIC CmpSwap (AtomicETH, no payload).
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    /// RC ATOMIC FetchAdd (AtomicETH, no payload).
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// RC SEND Last with Invalidate (IETH follows the BTH).
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// RC SEND Only with Invalidate (IETH follows the BTH).
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// RC FLUSH (FETH, then RETH; no payload).
    pub const RC_FLUSH: Opcode = Opcode(0x1c);
    /// RC ATOMIC WRITE (RETH, then exactly 8 bytes of payload).
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1d);
    /// UC SEND First.
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// UC SEND Middle.
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    /// UC SEND Last.
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    /// UC SEND Last with Immediate (ImmDt follows the BTH).
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    /// UC SEND Only.
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// UC SEND Only with Immediate (ImmDt follows the BTH).
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    /// UC RDMA WRITE First (carries the RETH).
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    /// UC RDMA WRITE Middle.
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    /// UC RDMA WRITE Last.
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    /// UC RDMA WRITE Last with Immediate (ImmDt follows the BTH).
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    /// UC RDMA WRITE Only (carries the RETH).
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2a);
    /// UC RDMA WRITE Only with Immediate (RETH, then ImmDt).
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2b);
    /// UD SEND Only (DETH follows the BTH).
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND Only with Immediate (DETH, then ImmDt).
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    /// RoCEv2 congestion notification packet (CNP), 16 reserved bytes after the BTH.
    pub const CNP: Opcode = Opcode(0x81);

    /// The UC opcode with this RC SEND or RDMA WRITE opcode's operation and position (the
    /// UC block is the RC one moved up by 0x20).
    pub const fn rc_to_uc(self) -> Opcode {
        Opcode(self.0 | 0x20)
    }

    /// Every opcode oxrdma understands, in numeric order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        (0..=u8::MAX).map(Opcode).filter(|op| op.info().is_ok())
    }

    /// The table entry for this opcode, or why there is none.
    #[inline]
    pub fn info(self) -> Result<OpcodeInfo> {
        INFO[usize::from(self.0)]
    }

    /// What [`Opcode::info`] answers, worked out once for every byte at compile time (every
    /// packet asks, several times).
    const fn build(self) -> Result<OpcodeInfo> {
        use Operation::*;
        use Payload::{Any, Exactly, None as NoData};
        use Position::*;
        let prefix = self.0 & 0xe0;
        let transport = match prefix {
            0x00 => Transport::Rc,
            0x20 => Transport::Uc,
            0x60 => Transport::Ud,
            0x80 if self.0 == 0x81 => Transport::Cnp,
            0x80 => return Err(WireError::BadOpcodeForTransport(self.0)),
            _ => return Err(WireError::UnsupportedTransport(self.0)),
        };
        let t = transport;
        // Names are spelled out (not built) so they are &'static and greppable.
        let mut info = match self.0 {
            0x00 => entry("RC_SEND_FIRST", t, Send, First, H0, Any),
            0x01 => entry("RC_SEND_MIDDLE", t, Send, Middle, H0, Any),
            0x02 => entry("RC_SEND_LAST", t, Send, Last, H0, Any),
            0x03 => entry(
                "RC_SEND_LAST_WITH_IMMEDIATE",
                t,
                SendWithImm,
                Last,
                IMM,
                Any,
            ),
            0x04 => entry("RC_SEND_ONLY", t, Send, Only, H0, Any),
            0x05 => entry(
                "RC_SEND_ONLY_WITH_IMMEDIATE",
                t,
                SendWithImm,
                Only,
                IMM,
                Any,
            ),
            0x06 => entry("RC_RDMA_WRITE_FIRST", t, Write, First, RETH, Any),
            0x07 => entry("RC_RDMA_WRITE_MIDDLE", t, Write, Middle, H0, Any),
            0x08 => entry("RC_RDMA_WRITE_LAST", t, Write, Last, H0, Any),
            0x09 => entry(
                "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                t,
                WriteWithImm,
                Last,
                IMM,
                Any,
            ),
            0x0a => entry("RC_RDMA_WRITE_ONLY", t, Write, Only, RETH, Any),
            0x0b => entry(
                "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                t,
                WriteWithImm,
                Only,
                RETH.with(IMM),
                Any,
            ),
            0x0c => entry("RC_RDMA_READ_REQUEST", t, ReadRequest, Only, RETH, NoData),
            0x0d => entry(
                "RC_RDMA_READ_RESPONSE_FIRST",
                t,
                ReadResponse,
                First,
                AETH,
                Any,
            ),
            0x0e => entry(
                "RC_RDMA_READ_RESPONSE_MIDDLE",
                t,
                ReadResponse,
                Middle,
                H0,
                Any,
            ),
            0x0f => entry(
                "RC_RDMA_READ_RESPONSE_LAST",
                t,
                ReadResponse,
                Last,
                AETH,
                Any,
            ),
            0x10 => entry(
                "RC_RDMA_READ_RESPONSE_ONLY",
                t,
                ReadResponse,
                Only,
                AETH,
                Any,
            ),
            0x11 => entry("RC_ACKNOWLEDGE", t, Acknowledge, Only, AETH, NoData),
            0x12 => entry(
                "RC_ATOMIC_ACKNOWLEDGE",
                t,
                AtomicAcknowledge,
                Only,
                AETH.with(Headers::ATOMIC_ACK_ETH),
                NoData,
            ),
            0x13 => entry(
                "RC_COMPARE_SWAP",
                t,
                CompareSwap,
                Only,
                Headers::ATOMIC_ETH,
                NoData,
            ),
            0x14 => entry(
                "RC_FETCH_ADD",
                t,
                FetchAdd,
                Only,
                Headers::ATOMIC_ETH,
                NoData,
            ),
            0x16 => entry(
                "RC_SEND_LAST_WITH_INVALIDATE",
                t,
                SendWithInv,
                Last,
                Headers::IETH,
                Any,
            ),
            0x17 => entry(
                "RC_SEND_ONLY_WITH_INVALIDATE",
                t,
                SendWithInv,
                Only,
                Headers::IETH,
                Any,
            ),
            0x1c => entry("RC_FLUSH", t, Flush, Only, Headers::FETH.with(RETH), NoData),
            0x1d => entry("RC_ATOMIC_WRITE", t, AtomicWrite, Only, RETH, Exactly(8)),
            0x20 => entry("UC_SEND_FIRST", t, Send, First, H0, Any),
            0x21 => entry("UC_SEND_MIDDLE", t, Send, Middle, H0, Any),
            0x22 => entry("UC_SEND_LAST", t, Send, Last, H0, Any),
            0x23 => entry(
                "UC_SEND_LAST_WITH_IMMEDIATE",
                t,
                SendWithImm,
                Last,
                IMM,
                Any,
            ),
            0x24 => entry("UC_SEND_ONLY", t, Send, Only, H0, Any),
            0x25 => entry(
                "UC_SEND_ONLY_WITH_IMMEDIATE",
                t,
                SendWithImm,
                Only,
                IMM,
                Any,
            ),
            0x26 => entry("UC_RDMA_WRITE_FIRST", t, Write, First, RETH, Any),
            0x27 => entry("UC_RDMA_WRITE_MIDDLE", t, Write, Middle, H0, Any),
            0x28 => entry("UC_RDMA_WRITE_LAST", t, Write, Last, H0, Any),
            0x29 => entry(
                "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                t,
                WriteWithImm,
                Last,
                IMM,
                Any,
            ),
            0x2a => entry("UC_RDMA_WRITE_ONLY", t, Write, Only, RETH, Any),
            0x2b => entry(
                "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                t,
                WriteWithImm,
                Only,
                RETH.with(IMM),
                Any,
            ),
            0x64 => entry("UD_SEND_ONLY", t, Send, Only, Headers::DETH, Any),
            0x65 => entry(
                "UD_SEND_ONLY_WITH_IMMEDIATE",
                t,
                SendWithImm,
                Only,
                Headers::DETH.with(IMM),
                Any,
            ),
            0x81 => entry("CNP", t, Cnp, Only, Headers::CNP_RESERVED, NoData),
            _ => return Err(WireError::BadOpcodeForTransport(self.0)),
        };
        info.opcode = self;
        Ok(info)
    }

    /// The opcode's name, or `UNKNOWN_OPCODE` for one outside the table.
    pub fn name(self) -> &'static str {
        self.info().map(|i| i.name).unwrap_or("UNKNOWN_OPCODE")
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Ok(info) => f.write_str(info.name),
            Err(_) => write!(f, "Opcode({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_size_and_transports() {
        let ops: Vec<_> = Opcode::all().collect();
        // 25 RC + 12 UC + 2 UD + CNP.
        assert_eq!(ops.len(), 40);
        for op in &ops {
            let info = op.info().unwrap();
            let expected = match op.0 & 0xe0 {
                0x00 => Transport::Rc,
                0x20 => Transport::Uc,
                0x60 => Transport::Ud,
                _ => Transport::Cnp,
            };
            assert_eq!(info.transport, expected, "{op:?}");
            // The name's prefix names the transport.
            let prefix = format!("{:?}", info.transport).to_uppercase();
            assert!(info.name.starts_with(&prefix), "{}", info.name);
        }
    }

    #[test]
    fn rejections_name_the_reason() {
        assert_eq!(
            Opcode(0x40).info(),
            Err(WireError::UnsupportedTransport(0x40))
        );
        assert_eq!(
            Opcode(0xa0).info(),
            Err(WireError::UnsupportedTransport(0xa0))
        );
        assert_eq!(
            Opcode(0x15).info(),
            Err(WireError::BadOpcodeForTransport(0x15))
        );
        assert_eq!(
            Opcode(0x2c).info(),
            Err(WireError::BadOpcodeForTransport(0x2c))
        );
        assert_eq!(
            Opcode(0x60).info(),
            Err(WireError::BadOpcodeForTransport(0x60))
        );
        assert_eq!(
            Opcode(0x80).info(),
            Err(WireError::BadOpcodeForTransport(0x80))
        );
    }

    #[test]
    fn uc_mirrors_rc_sends_and_writes() {
        for op in 0x00..=0x0b {
            let rc = Opcode(op).info().unwrap();
            let uc = Opcode(0x20 | op).info().unwrap();
            assert_eq!(
                (rc.operation, rc.position, rc.headers),
                (uc.operation, uc.position, uc.headers)
            );
            assert_eq!(&rc.name[3..], &uc.name[3..]);
        }
    }

    #[test]
    fn read_request_and_atomics_carry_no_payload() {
        for op in [
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_FETCH_ADD,
        ] {
            assert_eq!(op.info().unwrap().payload, Payload::None);
        }
        assert_eq!(
            Opcode::RC_ATOMIC_WRITE.info().unwrap().payload,
            Payload::Exactly(8)
        );
    }
}
