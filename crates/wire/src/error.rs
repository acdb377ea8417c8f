//! Why a byte sequence is not a valid RoCEv2 packet, or why a packet could not be emitted.

/// Every way parsing or emitting can fail. Parsing never panics; it returns one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before a header (or the ICRC) is complete.
    #[error("short packet: {header} needs {needed} bytes, {available} left")]
    Truncated {
        /// What was being read, e.g. `"BTH"`, `"ICRC"` or `"CM REQ"`.
        header: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes the buffer had left.
        available: usize,
    },
    /// The transport prefix (top 3 bits of the opcode) is one oxrdma does not speak (RD, XRC,
    /// reserved).
    #[error("unsupported transport in opcode {0:#04x}")]
    UnsupportedTransport(u8),
    /// The opcode does not exist for its transport (e.g. UD SEND_FIRST, UC READ).
    #[error("opcode {0:#04x} is not defined for its transport")]
    BadOpcodeForTransport(u8),
    /// BTH transport header version other than 0.
    #[error("unsupported BTH transport version {0}")]
    BadTransportVersion(u8),
    /// The pad count does not fit the payload: payload + pad not a multiple of 4, pad larger
    /// than the data, or pad on a FIRST/MIDDLE packet or on an opcode without payload.
    #[error("bad pad count {pad} with {data_len} bytes of payload area")]
    BadPad {
        /// The BTH's Pad Count.
        pad: u8,
        /// Bytes between the extension headers and the ICRC (payload plus pad).
        data_len: usize,
    },
    /// Bytes follow the headers of an opcode that carries no payload.
    #[error("opcode {opcode:#04x} carries no payload, but {len} bytes follow its headers")]
    UnexpectedPayload {
        /// The BTH opcode.
        opcode: u8,
        /// Length of the unexpected payload in bytes.
        len: usize,
    },
    /// The payload length is impossible for this opcode (over 4096 bytes, or not 8 for
    /// ATOMIC_WRITE).
    #[error("payload of {len} bytes is not allowed for opcode {opcode:#04x}")]
    BadPayloadLength {
        /// The BTH opcode.
        opcode: u8,
        /// The payload length in bytes.
        len: usize,
    },
    /// The SACK payload of a selective-repeat ACK is not whole words, or too long.
    #[error("SACK payload of {0} bytes is not whole 32-bit words (at most 1024 bytes)")]
    BadSack(usize),
    /// AETH syndrome with the reserved type bits (0b10) or the reserved top bit set.
    #[error("reserved AETH syndrome {0:#04x}")]
    ReservedSyndrome(u8),
    /// The invariant CRC does not match the packet.
    #[error("ICRC mismatch: computed {computed:#010x}, packet carries {carried:#010x}")]
    IcrcMismatch {
        /// The ICRC computed for the packet.
        computed: u32,
        /// The ICRC the packet's last four bytes carry.
        carried: u32,
    },
    /// The IP/UDP header given for the ICRC is not IPv4 or IPv6 followed by an 8-byte UDP
    /// header.
    #[error("not an IPv4 or IPv6 header followed by UDP: {0}")]
    BadIpHeader(&'static str),
    /// The packet's extension headers do not match what its opcode requires (emit only).
    #[error("extension headers do not match opcode {0:#04x}")]
    HeadersMismatch(u8),
    /// The output buffer is too small (emit only).
    #[error("buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// Bytes the packet needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A protocol version this crate does not speak (e.g. rsockets' connection data).
    #[error("unsupported {0}")]
    Unsupported(&'static str),
    /// A field holds a value its protocol forbids (named: e.g. `"MPA key"`).
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// An MPA FPDU's CRC32c does not match its bytes.
    #[error("MPA CRC mismatch: computed {computed:#010x}, FPDU carries {carried:#010x}")]
    MpaCrcMismatch {
        /// The CRC32c computed over the FPDU.
        computed: u32,
        /// The CRC32c the FPDU carries.
        carried: u32,
    },
}

/// Result type of this crate.
pub type Result<T> = core::result::Result<T, WireError>;

/// Fails with [`WireError::Truncated`] unless `buf` holds at least `needed` bytes.
pub(crate) fn need(header: &'static str, buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(WireError::Truncated {
            header,
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Fails with [`WireError::BufferTooSmall`] unless `buf` has room for `needed` bytes.
pub(crate) fn room(buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(WireError::BufferTooSmall {
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}
