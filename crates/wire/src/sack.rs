//! The SACK of an oxrdma ACK: what the responder holds beyond the PSN the ACK
//! acknowledges, when both ends speak selective repeat (the BTH's selective-repeat bit).
//! It is the ACK's payload, a bitmap: bit `i` (byte `i / 8`, least significant bit first)
//! says whether PSN `ack + 1 + i` is held (or executed already: an ACK queued before
//! others acknowledges less than the responder has).
//! Whole 32-bit words, at most [`MAX_LEN`] bytes: 8,192 PSNs. The requester learns of
//! every packet held in that range with each ACK (a list of blocks would have to leave
//! some out once the holes outnumber it, and a packet left out looks lost).
//!
//! An ACK without the bit carries no payload, as IBA says.

use crate::error::{Result, WireError};
use crate::psn::Psn;

/// Bytes of SACK an ACK carries at most.
pub const MAX_LEN: usize = 1024;

/// Checks a SACK payload's length: whole words, no more than [`MAX_LEN`].
pub fn check_len(len: usize) -> Result<()> {
    if !len.is_multiple_of(4) || len > MAX_LEN {
        return Err(WireError::BadSack(len));
    }
    Ok(())
}

/// Writes the bitmap of an ACK of `ack` into `buf`: `held(psn)` for PSNs from `ack + 1`,
/// up to the last one held (at most [`MAX_LEN`] bytes, and what `buf` holds); returns the
/// bytes written (0: nothing held).
pub fn emit(ack: Psn, span: u32, held: impl Fn(Psn) -> bool, buf: &mut [u8]) -> usize {
    let first = ack.next();
    let bits = span.min((MAX_LEN.min(buf.len() & !3) * 8) as u32);
    let Some(last) = (0..bits).rev().find(|&i| held(first.add(i))) else {
        return 0;
    };
    let len = (last as usize / 32 + 1) * 4;
    buf[..len].fill(0);
    for i in 0..=last {
        if held(first.add(i)) {
            buf[i as usize / 8] |= 1 << (i % 8);
        }
    }
    len
}

/// The runs of PSNs (`start..end`) a SACK payload of an ACK of `ack` says are held.
pub fn runs(ack: Psn, payload: &[u8]) -> impl Iterator<Item = (Psn, Psn)> + '_ {
    let first = ack.next();
    let bits = (payload.len() * 8) as u32;
    let bit = move |i: u32| payload[i as usize / 8] & (1 << (i % 8)) != 0;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bits && !bit(i) {
            // Skip empty bytes whole.
            if i % 8 == 0 && payload[i as usize / 8] == 0 {
                i += 8;
            } else {
                i += 1;
            }
        }
        let start = i;
        while i < bits && bit(i) {
            i += 1;
        }
        (start < i.min(bits)).then(|| (first.add(start), first.add(i)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bitmap_round_trips_runs_and_is_bounded() {
        let ack = Psn::new(0xff_fffd); // wraps past 2^24
        let held = [2u32, 3, 4, 9, 39];
        let is_held = |p: Psn| held.iter().any(|&h| ack.add(h) == p);
        let mut buf = [0xaa; 2048];
        let n = emit(ack, 100, is_held, &mut buf);
        assert_eq!(n, 8, "bits up to 38 need two words");
        check_len(n).unwrap();
        let got: Vec<_> = runs(ack, &buf[..n]).collect();
        assert_eq!(
            got,
            [
                (ack.add(2), ack.add(5)),
                (ack.add(9), ack.add(10)),
                (ack.add(39), ack.add(40))
            ]
        );
        assert_eq!(emit(ack, 100, |_| false, &mut buf), 0);
        assert_eq!(emit(ack, 1 << 20, |_| true, &mut buf), MAX_LEN);
        assert_eq!(runs(ack, &buf[..MAX_LEN]).count(), 1);
        assert!(check_len(6).is_err());
        assert!(check_len(MAX_LEN + 4).is_err());
    }

    #[test]
    fn only_a_selective_repeat_ack_carries_a_sack() {
        use crate::{AethRepr, BthRepr, ExtHeaders, Opcode, PacketRepr, Syndrome};
        let mut p = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_ACKNOWLEDGE,
                solicited: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qpn: 7,
                ack_req: false,
                psn: Psn::new(4),
                selective_repeat: true,
            },
            ext: ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: Syndrome::Ack { credits: 31 },
                    msn: 2,
                }),
                ..ExtHeaders::default()
            },
            payload: &[],
        };
        let mut buf = [0u8; 64];
        let hlen = p.emit_headers_for(4, &mut buf).unwrap();
        let n = emit(Psn::new(4), 32, |q| q == Psn::new(7), &mut buf[hlen..]);
        let len = hlen + n + 4;
        let parsed = PacketRepr::parse(&buf[..len]).unwrap();
        assert!(parsed.bth.selective_repeat);
        assert_eq!(
            runs(parsed.bth.psn, parsed.payload).collect::<Vec<_>>(),
            [(Psn::new(7), Psn::new(8))]
        );
        // The same bytes without the bit are an ACK with a payload: malformed.
        buf[8] &= !0x40;
        assert!(PacketRepr::parse(&buf[..len]).is_err());
        p.bth.selective_repeat = false;
        assert!(p.emit_headers_for(4, &mut buf).is_err());
        p.bth.selective_repeat = true;
        assert!(p.emit_headers_for(6, &mut [0u8; 64]).is_err());
    }
}
