//! A whole RoCEv2 transport packet (the UDP payload): BTH, the extension headers its opcode
//! names, payload, pad and ICRC.

use crate::aeth::{Aeth, AethRepr};
use crate::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use crate::atomic_eth::{AtomicEth, AtomicEthRepr};
use crate::bth::{Bth, BthRepr};
use crate::deth::{Deth, DethRepr};
use crate::error::{need, Result, WireError};
use crate::feth::{Feth, FethRepr};
use crate::icrc::ICRC_LEN;
use crate::ieth::Ieth;
use crate::immdt::ImmDt;
use crate::opcode::{Headers, OpcodeInfo, Operation, Payload, Position, MAX_PAYLOAD};
use crate::reth::{Reth, RethRepr};

/// Length of the reserved area after the BTH of a RoCEv2 CNP.
pub const CNP_RESERVED_LEN: usize = 16;

/// The extension headers of a packet; which are present is fixed by the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// Datagram ETH (UD opcodes).
    pub deth: Option<DethRepr>,
    /// FLUSH ETH (RC FLUSH).
    pub feth: Option<FethRepr>,
    /// RDMA ETH (WRITE First/Only, READ Request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// Atomic ETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ACK ETH (Acknowledge, ATOMIC Acknowledge, READ Response First/Last/Only).
    pub aeth: Option<AethRepr>,
    /// Atomic Acknowledge ETH (ATOMIC Acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data, as the big-endian reading of its four bytes.
    pub immdt: Option<u32>,
    /// The rkey to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// The set of headers present (CNP's reserved area is never "present": it has no fields).
    pub fn present(&self) -> Headers {
        let mut h = Headers::NONE;
        let mut add = |on: bool, bit: Headers| {
            if on {
                h = h.with(bit);
            }
        };
        add(self.deth.is_some(), Headers::DETH);
        add(self.feth.is_some(), Headers::FETH);
        add(self.reth.is_some(), Headers::RETH);
        add(self.atomic_eth.is_some(), Headers::ATOMIC_ETH);
        add(self.aeth.is_some(), Headers::AETH);
        add(self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH);
        add(self.immdt.is_some(), Headers::IMMDT);
        add(self.ieth.is_some(), Headers::IETH);
        h
    }
}

/// Byte length of the headers in `h`, BTH included.
pub fn headers_len(h: Headers) -> usize {
    let mut n = Bth::<&[u8]>::LEN;
    for (bit, len) in [
        (Headers::DETH, Deth::<&[u8]>::LEN),
        (Headers::FETH, Feth::<&[u8]>::LEN),
        (Headers::RETH, Reth::<&[u8]>::LEN),
        (Headers::ATOMIC_ETH, AtomicEth::<&[u8]>::LEN),
        (Headers::AETH, Aeth::<&[u8]>::LEN),
        (Headers::ATOMIC_ACK_ETH, AtomicAckEth::<&[u8]>::LEN),
        (Headers::IMMDT, ImmDt::<&[u8]>::LEN),
        (Headers::IETH, Ieth::<&[u8]>::LEN),
        (Headers::CNP_RESERVED, CNP_RESERVED_LEN),
    ] {
        if h.contains(bit) {
            n += len;
        }
    }
    n
}

/// Pad bytes that bring a payload of `len` bytes to a multiple of 4.
pub const fn pad_for(len: usize) -> u8 {
    ((4 - (len % 4)) % 4) as u8
}

/// A parsed (or to-be-emitted) transport packet. The payload borrows from the packet bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// The Base Transport Header.
    pub bth: BthRepr,
    /// The extension headers the opcode calls for.
    pub ext: ExtHeaders,
    /// The payload, without pad or ICRC (on a selective-repeat ACK, the SACK).
    pub payload: &'a [u8],
}

/// Splits `len` bytes off the front of `*rest`, or fails naming `header`.
fn take<'a>(rest: &mut &'a [u8], header: &'static str, len: usize) -> Result<&'a [u8]> {
    need(header, rest, len)?;
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    Ok(head)
}

impl<'a> PacketRepr<'a> {
    /// Parses a UDP payload: headers, payload and pad (the trailing 4-byte ICRC must be there
    /// but is not checked; see [`crate::icrc::verify`]).
    pub fn parse(packet: &'a [u8]) -> Result<Self> {
        let bth = BthRepr::parse(&Bth::new_checked(packet)?)?;
        let info = bth.opcode.info()?;
        let mut rest = &packet[Bth::<&[u8]>::LEN..];
        let h = info.headers;
        let mut ext = ExtHeaders::default();
        if h.contains(Headers::DETH) {
            ext.deth = Some(DethRepr::parse(&Deth::new_unchecked(take(
                &mut rest, "DETH", 8,
            )?)));
        }
        if h.contains(Headers::FETH) {
            ext.feth = Some(FethRepr::parse(&Feth::new_unchecked(take(
                &mut rest, "FETH", 4,
            )?)));
        }
        if h.contains(Headers::RETH) {
            ext.reth = Some(RethRepr::parse(&Reth::new_unchecked(take(
                &mut rest, "RETH", 16,
            )?)));
        }
        if h.contains(Headers::ATOMIC_ETH) {
            let b = take(&mut rest, "AtomicETH", 28)?;
            ext.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_unchecked(b)));
        }
        if h.contains(Headers::AETH) {
            ext.aeth = Some(AethRepr::parse(&Aeth::new_unchecked(take(
                &mut rest, "AETH", 4,
            )?))?);
        }
        if h.contains(Headers::ATOMIC_ACK_ETH) {
            let b = take(&mut rest, "AtomicAckETH", 8)?;
            ext.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(b)));
        }
        if h.contains(Headers::IMMDT) {
            ext.immdt = Some(ImmDt::new_unchecked(take(&mut rest, "ImmDt", 4)?).value());
        }
        if h.contains(Headers::IETH) {
            ext.ieth = Some(Ieth::new_unchecked(take(&mut rest, "IETH", 4)?).rkey());
        }
        if h.contains(Headers::CNP_RESERVED) {
            take(&mut rest, "CNP reserved", CNP_RESERVED_LEN)?;
        }
        need("ICRC", rest, ICRC_LEN)?;
        let data = &rest[..rest.len() - ICRC_LEN];
        let pad = Bth::new_unchecked(packet).pad_count();
        let payload = if bth.selective_repeat && info.operation == Operation::Acknowledge {
            // A selective-repeat ACK: its payload is a SACK bitmap.
            if pad != 0 {
                return Err(WireError::BadPad {
                    pad,
                    data_len: data.len(),
                });
            }
            crate::sack::check_len(data.len())?;
            data
        } else {
            check_payload(&info, data, pad)?
        };
        Ok(PacketRepr { bth, ext, payload })
    }

    /// Bytes from the BTH to the end of the extension headers.
    pub fn header_len(&self) -> usize {
        headers_len(
            self.bth
                .opcode
                .info()
                .map(|i| i.headers)
                .unwrap_or_default(),
        )
    }

    /// Bytes of the whole packet: headers, payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + usize::from(pad_for(self.payload.len())) + ICRC_LEN
    }

    /// Writes the BTH and extension headers for this packet's opcode, with the pad count its
    /// payload needs, into the front of `buf`; returns their length. The payload, pad and
    /// ICRC are left to the caller (so a payload can be sent from where it lies).
    pub fn emit_headers(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_headers_for(self.payload.len(), buf)
    }

    /// [`Self::emit_headers`] for a payload of `payload_len` bytes that is not in
    /// `self.payload` (the caller writes it straight after the headers).
    pub fn emit_headers_for(&self, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        let info = self.bth.opcode.info()?;
        if self.ext.present() != info.headers.without(Headers::CNP_RESERVED) {
            return Err(WireError::HeadersMismatch(self.bth.opcode.0));
        }
        if self.bth.selective_repeat && info.operation == Operation::Acknowledge {
            crate::sack::check_len(payload_len)?;
        } else {
            check_emit_payload(&info, payload_len)?;
        }
        let len = headers_len(info.headers);
        if buf.len() < len {
            return Err(WireError::BufferTooSmall {
                needed: len,
                available: buf.len(),
            });
        }
        let (bth, mut rest) = buf.split_at_mut(Bth::<&[u8]>::LEN);
        let mut bth = Bth::new_unchecked(bth);
        self.bth.emit(&mut bth);
        bth.set_pad_count(pad_for(payload_len));
        let mut next = |n: usize| {
            let (head, tail) = core::mem::take(&mut rest).split_at_mut(n);
            rest = tail;
            head
        };
        let e = &self.ext;
        if let Some(r) = e.deth {
            r.emit(&mut Deth::new_unchecked(next(8)));
        }
        if let Some(r) = e.feth {
            r.emit(&mut Feth::new_unchecked(next(4)));
        }
        if let Some(r) = e.reth {
            r.emit(&mut Reth::new_unchecked(next(16)));
        }
        if let Some(r) = e.atomic_eth {
            r.emit(&mut AtomicEth::new_unchecked(next(28)));
        }
        if let Some(r) = e.aeth {
            r.emit(&mut Aeth::new_unchecked(next(4)));
        }
        if let Some(r) = e.atomic_ack_eth {
            r.emit(&mut AtomicAckEth::new_unchecked(next(8)));
        }
        if let Some(v) = e.immdt {
            ImmDt::new_unchecked(next(4)).set_value(v);
        }
        if let Some(rkey) = e.ieth {
            Ieth::new_unchecked(next(4)).set_rkey(rkey);
        }
        if info.headers.contains(Headers::CNP_RESERVED) {
            next(CNP_RESERVED_LEN).fill(0);
        }
        Ok(len)
    }

    /// Writes the whole packet into `buf` with a zero ICRC and returns its length. Fill in the
    /// ICRC with [`crate::icrc::fill`] once the IP and UDP headers are known.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(WireError::BufferTooSmall {
                needed: total,
                available: buf.len(),
            });
        }
        let hlen = self.emit_headers(buf)?;
        let end = hlen + self.payload.len();
        buf[hlen..end].copy_from_slice(self.payload);
        buf[end..total].fill(0);
        Ok(total)
    }
}

/// Validates the payload area (`data` = payload + pad) against the opcode and pad count.
fn check_payload<'a>(info: &OpcodeInfo, data: &'a [u8], pad: u8) -> Result<&'a [u8]> {
    let opcode = info.opcode.0;
    let bad_pad = WireError::BadPad {
        pad,
        data_len: data.len(),
    };
    if info.payload == Payload::None {
        if !data.is_empty() {
            return Err(WireError::UnexpectedPayload {
                opcode,
                len: data.len(),
            });
        }
        if pad != 0 {
            return Err(bad_pad);
        }
        return Ok(data);
    }
    if !data.len().is_multiple_of(4) || usize::from(pad) > data.len() {
        return Err(bad_pad);
    }
    if pad != 0 && matches!(info.position, Position::First | Position::Middle) {
        return Err(bad_pad);
    }
    let payload = &data[..data.len() - usize::from(pad)];
    check_emit_payload(info, payload.len())?;
    Ok(payload)
}

/// Validates a payload length against the opcode's rule.
fn check_emit_payload(info: &OpcodeInfo, len: usize) -> Result<()> {
    // FIRST and MIDDLE packets carry whole MTUs, so they never need pad.
    let aligned = len.is_multiple_of(4) || info.position.ends_message();
    let ok = aligned
        && match info.payload {
            Payload::None => len == 0,
            Payload::Any => len <= MAX_PAYLOAD,
            Payload::Exactly(n) => len == n,
        };
    if ok {
        Ok(())
    } else if info.payload == Payload::None {
        Err(WireError::UnexpectedPayload {
            opcode: info.opcode.0,
            len,
        })
    } else {
        Err(WireError::BadPayloadLength {
            opcode: info.opcode.0,
            len,
        })
    }
}
