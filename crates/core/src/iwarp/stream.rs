//! DDP segments on a TCP stream, without I/O: a message cut into FPDUs no longer than the
//! path allows (`Segmenter`, `write_fpdu`), and the stream read back into whole segments
//! whatever cuts TCP made in it (`FpduReader`).

use oxrdma_wire::iwarp::ddp::{DdpRepr, Placement, RdmapOpcode};
use oxrdma_wire::iwarp::mpa;
use oxrdma_wire::WireError;

/// The payload bytes a segment with a `header_len`-byte DDP header may carry in an FPDU
/// of at most `max_fpdu` bytes (the TCP segment's size, so that an FPDU rides alone).
pub fn max_payload(max_fpdu: usize, header_len: usize, crc: bool) -> usize {
    let trailer = if crc { mpa::CRC_LEN } else { 0 };
    let ulpdu = (max_fpdu.saturating_sub(trailer) & !3).saturating_sub(mpa::FPDU_HEADER_LEN);
    ulpdu.saturating_sub(header_len)
}

/// Writes the FPDU of one segment at the start of `buf`: `header`, `payload`, pad and (with
/// `crc`) the CRC32c. Returns its length.
pub fn write_fpdu(
    buf: &mut [u8],
    header: &DdpRepr,
    payload: &[u8],
    crc: bool,
) -> Result<usize, WireError> {
    let at = mpa::FPDU_HEADER_LEN;
    let h = header.header_len();
    let needed = mpa::fpdu_len(h + payload.len(), crc);
    if buf.len() < needed {
        return Err(WireError::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    header.emit(&mut buf[at..])?;
    buf[at + h..at + h + payload.len()].copy_from_slice(payload);
    mpa::seal(buf, h + payload.len(), crc)
}

/// The segments of one message: their headers in order, and which bytes of the message
/// each carries. A tagged message's offsets run from its base offset; an untagged one's
/// from 0 within its MSN. Only the last has L set; an empty message is one empty segment.
#[derive(Debug, Clone)]
pub struct Segmenter {
    opcode: RdmapOpcode,
    first: Placement,
    len: u64,
    done: u64,
    per: u64,
    ended: bool,
}

impl Segmenter {
    /// Cuts a message of `len` bytes whose first segment goes to `first`, each segment
    /// in an FPDU of at most `max_fpdu` bytes.
    pub fn new(
        opcode: RdmapOpcode,
        first: Placement,
        len: u64,
        max_fpdu: usize,
        crc: bool,
    ) -> Result<Segmenter, WireError> {
        let header = DdpRepr {
            last: true,
            opcode,
            placement: first,
        };
        // Checks the placement fits the opcode.
        header.emit(&mut [0u8; 18])?;
        let per = max_payload(max_fpdu, header.header_len(), crc) as u64;
        if per == 0 {
            return Err(WireError::Malformed("FPDU too small for a DDP segment"));
        }
        Ok(Segmenter {
            opcode,
            first,
            len,
            done: 0,
            per,
            ended: false,
        })
    }
}

impl Iterator for Segmenter {
    /// A segment's header, and the range of the message's bytes it carries.
    type Item = (DdpRepr, std::ops::Range<u64>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        let start = self.done;
        let end = (start + self.per).min(self.len);
        self.done = end;
        self.ended = end == self.len;
        let placement = match self.first {
            Placement::Tagged { stag, offset } => Placement::Tagged {
                stag,
                offset: offset.wrapping_add(start),
            },
            Placement::Untagged {
                ulp,
                queue,
                msn,
                offset,
            } => Placement::Untagged {
                ulp,
                queue,
                msn,
                offset: offset.wrapping_add(start as u32),
            },
        };
        let header = DdpRepr {
            last: self.ended,
            opcode: self.opcode,
            placement,
        };
        Some((header, start..end))
    }
}

/// Most bytes an [`FpduReader`] holds: the longest FPDU (a 65,535-byte segment, pad and
/// CRC) and what one read may bring beyond it.
pub const READER_CAPACITY: usize = 2 * 65_544;

/// A TCP stream read back into DDP segments: bytes go in as they were read, and whole
/// segments come out, their CRC checked. A CRC or header that is wrong ends the stream
/// (the caller sends a TERMINATE and closes).
#[derive(Debug)]
pub struct FpduReader {
    buf: Vec<u8>,
    start: usize,
    crc: bool,
}

impl FpduReader {
    /// A reader for a stream whose FPDUs carry CRCs if `crc`.
    pub fn new(crc: bool) -> FpduReader {
        FpduReader {
            buf: Vec::new(),
            start: 0,
            crc,
        }
    }

    /// Room for more: how many bytes [`Self::push`] takes now (read no more than this).
    pub fn room(&self) -> usize {
        READER_CAPACITY - (self.buf.len() - self.start)
    }

    /// Bytes taken that no whole segment has used yet (the start of an FPDU).
    pub fn held(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Takes bytes read from the stream; returns how many it took (at most [`Self::room`]).
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let n = bytes.len().min(self.room());
        self.buf.extend_from_slice(&bytes[..n]);
        n
    }

    /// The next whole segment (its header and payload), if one has arrived.
    pub fn next_segment(&mut self) -> Result<Option<(DdpRepr, &[u8])>, WireError> {
        let (seg_len, fpdu_len) = match mpa::parse_fpdu(&self.buf[self.start..], self.crc) {
            Err(WireError::Truncated { .. }) => return Ok(None),
            Err(e) => return Err(e),
            Ok((seg, len)) => (seg.len(), len),
        };
        let at = self.start + mpa::FPDU_HEADER_LEN;
        self.start += fpdu_len;
        let seg = &self.buf[at..at + seg_len];
        let (header, h) = DdpRepr::parse(seg)?;
        Ok(Some((header, &seg[h..])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxrdma_wire::iwarp::ddp::Queue;
    use proptest::prelude::*;

    #[test]
    fn payload_fits_the_fpdu() {
        for max in 16..3000 {
            for (h, crc) in [(14, true), (18, false), (14, false), (18, true)] {
                let p = max_payload(max, h, crc);
                if p > 0 {
                    assert!(mpa::fpdu_len(h + p, crc) <= max, "{max} {h} {crc}");
                    assert!(
                        mpa::fpdu_len(h + p + 4, crc) > max,
                        "{max} {h} {crc}: room left"
                    );
                }
            }
        }
        // A 1460-byte TCP segment: 1,440 bytes of a WRITE with CRC (2 + 14 + 1440 + 4).
        assert_eq!(max_payload(1460, 14, true), 1440);
    }

    #[test]
    fn a_write_in_segments() {
        let first = Placement::Tagged {
            stag: 7,
            offset: 1000,
        };
        let s: Vec<_> = Segmenter::new(RdmapOpcode::Write, first, 3000, 1460, true)
            .unwrap()
            .collect();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].1, 1440..2880);
        assert_eq!(
            s[1].0.placement,
            Placement::Tagged {
                stag: 7,
                offset: 2440
            }
        );
        assert_eq!(
            s.iter().map(|(h, _)| h.last).collect::<Vec<_>>(),
            [false, false, true]
        );
        // An empty SEND is one empty, last segment.
        let send = Placement::Untagged {
            ulp: 0,
            queue: Queue::Send,
            msn: 1,
            offset: 0,
        };
        let s: Vec<_> = Segmenter::new(RdmapOpcode::Send, send, 0, 1460, true)
            .unwrap()
            .collect();
        assert_eq!(s.len(), 1);
        assert!(s[0].0.last && s[0].1.is_empty());
        // A placement that does not fit the opcode.
        assert!(Segmenter::new(RdmapOpcode::Send, first, 10, 1460, true).is_err());
    }

    #[test]
    fn a_bad_crc_ends_the_stream() {
        let h = DdpRepr {
            last: true,
            opcode: RdmapOpcode::Write,
            placement: Placement::Tagged { stag: 1, offset: 0 },
        };
        let mut fpdu = [0u8; 64];
        let n = write_fpdu(&mut fpdu, &h, b"data", true).unwrap();
        fpdu[20] ^= 0x10;
        let mut r = FpduReader::new(true);
        r.push(&fpdu[..n]);
        assert!(matches!(
            r.next_segment(),
            Err(WireError::MpaCrcMismatch { .. })
        ));
    }

    proptest! {
        /// Messages cut into FPDUs, the stream cut anywhere, read back: the same headers
        /// and bytes, in order.
        #[test]
        fn messages_survive_any_cuts(lens in proptest::collection::vec(0u64..5000, 1..6),
                                     max_fpdu in 40usize..2000, crc in any::<bool>(),
                                     cuts in proptest::collection::vec(1usize..3000, 1..50)) {
            let mut stream = Vec::new();
            let mut sent = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                let msg: Vec<u8> = (0..len).map(|k| (k as u8) ^ (i as u8)).collect();
                let (op, first) = if i % 2 == 0 {
                    (RdmapOpcode::Write, Placement::Tagged { stag: i as u32, offset: 1 << 40 })
                } else {
                    (RdmapOpcode::Send, Placement::Untagged { ulp: 0, queue: Queue::Send, msn: i as u32, offset: 0 })
                };
                for (h, range) in Segmenter::new(op, first, len, max_fpdu, crc).unwrap() {
                    let mut buf = vec![0u8; max_fpdu];
                    let payload = &msg[range.start as usize..range.end as usize];
                    let n = write_fpdu(&mut buf, &h, payload, crc).unwrap();
                    prop_assert!(n <= max_fpdu);
                    stream.extend_from_slice(&buf[..n]);
                    sent.push((h, payload.to_vec()));
                }
            }
            let mut r = FpduReader::new(crc);
            let (mut at, mut got, mut k) = (0, Vec::new(), 0);
            while at < stream.len() {
                let cut = cuts[k % cuts.len()];
                k += 1;
                let end = (at + cut).min(stream.len());
                at += r.push(&stream[at..end]);
                while let Some((h, p)) = r.next_segment().unwrap() {
                    got.push((h, p.to_vec()));
                }
            }
            prop_assert_eq!(got, sent);
        }
    }
}
