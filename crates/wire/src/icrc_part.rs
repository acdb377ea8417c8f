//! The ICRC in two halves, so that a payload is hashed while it is in the cache.
//!
//! The ICRC covers the IP and UDP headers before the transport bytes, and the sender knows
//! the IPv4 Identification only as the packet goes to the kernel, long after the engine
//! copied the payload out of a memory region. Hashed then, a 4 KiB payload is read a second
//! time from L2 (a third of the sender's own work besides the copy). But a CRC is linear:
//! the register after `headers ++ transport` is the register after `headers` moved past
//! `transport.len()` zero bytes (one multiplication by x^(8n) mod P), XORed with the
//! register `transport` alone leaves when started from zero. So whoever writes the payload
//! takes [`transport_part`] right after the copy, from L1, and the driver finishes it with
//! [`complete`] in time that does not grow with the payload.
//!
//! Engine packets of at least [`PART_MIN`] transport bytes carry their part in the ICRC
//! field ([`carries_part`]); shorter ones are cheaper hashed whole by [`crate::icrc::fill`].

use crate::error::{need, Result};
use crate::icrc::{masked_ip_udp, ICRC_LEN, LRH_ONES, MAX_IP_UDP};

const BTH_LEN: usize = crate::bth::Bth::<&[u8]>::LEN;

/// Transport bytes (BTH up to the ICRC) from which a packet's part is taken apart.
pub const PART_MIN: usize = 2048;

/// The CRC-32 polynomial, bit-reflected (x^0 is the most significant bit).
const POLY: u32 = 0xedb8_8320;
/// x^0 and x^8, reflected.
const X0: u32 = 0x8000_0000;
const X8: u32 = 0x0080_0000;

/// Whether an engine packet with `transport_len` bytes before its ICRC carries its part in
/// the ICRC field.
pub fn carries_part(transport_len: usize) -> bool {
    transport_len >= PART_MIN
}

/// The transport bytes' share of the ICRC (BTH with byte 4 masked, up to the ICRC): the
/// CRC register they leave when hashed from zero.
pub fn transport_part(transport: &[u8]) -> u32 {
    let bth = transport.len().min(BTH_LEN);
    part_end(hash_more(part_start(&transport[..bth]), &transport[bth..]))
}

/// The hash of a packet's transport part after its headers (BTH first, its byte 4 masked),
/// in crc32fast's form: continue it with [`hash_more`] (or a copy that hashes as it goes)
/// and end it with [`part_end`].
pub fn part_start(headers: &[u8]) -> u32 {
    // One call over a masked copy: crc32fast's fixed cost per call is the most of it.
    let mut masked = [0u8; 64];
    let Some(m) = masked.get_mut(..headers.len()) else {
        let bth = headers.len().min(BTH_LEN);
        return hash_more(part_start(&headers[..bth]), &headers[bth..]);
    };
    m.copy_from_slice(headers);
    if let Some(b) = m.get_mut(4) {
        *b = 0xff; // FECN, BECN and reserved bits: masked
    }
    // crc32fast keeps the register inverted: an initial value of all ones is a zero one.
    hash_more(!0, m)
}

/// `hash` (crc32fast's form) continued over `bytes`.
pub fn hash_more(hash: u32, bytes: &[u8]) -> u32 {
    if bytes.is_empty() {
        return hash;
    }
    let mut h = crc32fast::Hasher::new_with_initial(hash);
    h.update(bytes);
    h.finalize()
}

/// The part a finished hash of transport bytes gives (the register, uninverted).
pub fn part_end(hash: u32) -> u32 {
    !hash
}

/// Writes [`transport_part`] of `udp_payload` (BTH through ICRC) into its ICRC field;
/// false if it has no room for one.
pub fn write_part(udp_payload: &mut [u8]) -> bool {
    let Some(end) = udp_payload.len().checked_sub(ICRC_LEN) else {
        return false;
    };
    let part = transport_part(&udp_payload[..end]);
    udp_payload[end..].copy_from_slice(&part.to_le_bytes());
    true
}

/// Replaces the part in the ICRC field of `udp_payload` with the ICRC, given the IP and UDP
/// headers it is sent with; returns the ICRC.
pub fn complete(ip_udp: &[u8], udp_payload: &mut [u8]) -> Result<u32> {
    need("ICRC", udp_payload, ICRC_LEN)?;
    let end = udp_payload.len() - ICRC_LEN;
    let field = &mut udp_payload[end..];
    let part = u32::from_le_bytes([field[0], field[1], field[2], field[3]]);
    let mut buf = [0xffu8; LRH_ONES + MAX_IP_UDP];
    let n = masked_ip_udp(ip_udp, &mut buf[LRH_ONES..])?;
    let mut h = crate::icrc::hasher();
    h.update(&buf[..LRH_ONES + n]);
    let headers = !h.finalize();
    let icrc = !(shift_by(headers, end) ^ part);
    field.copy_from_slice(&icrc.to_le_bytes());
    Ok(icrc)
}

/// a(x) * b(x) mod P, reflected. Without branches: a packet's bits are random, and
/// mispredicted they cost more than the arithmetic.
const fn multiply(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    let mut i = 0;
    while i < 32 {
        p ^= b & ((a >> (31 - i)) & 1).wrapping_neg();
        b = (b >> 1) ^ (POLY & (b & 1).wrapping_neg());
        i += 1;
    }
    p
}

/// x^(8 * len) mod P, reflected: multiplying a register by it moves it past `len` zero
/// bytes.
const fn x8n(mut len: usize) -> u32 {
    let (mut p, mut sq) = (X0, X8);
    while len != 0 {
        if len & 1 != 0 {
            p = multiply(sq, p);
        }
        sq = multiply(sq, sq);
        len >>= 1;
    }
    p
}

/// The two constants that fold a 128-bit lane of CRC-32 state forward by `bits` (a
/// multiple of 8, at least 64) with carry-less multiplications, for the lane's low and
/// high 64 bits: x^(bits + 32) and x^(bits - 32) mod P, reflected, as 33-bit values (the
/// k1..k4 of Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ").
pub const fn fold_keys(bits: usize) -> (u64, u64) {
    (
        (x8n((bits + 32) / 8) as u64) << 1,
        (x8n((bits - 32) / 8) as u64) << 1,
    )
}

/// Multiplication by x^(8 * len) mod P, as the 32 products of it with x^0..x^31: a
/// register times it is the XOR of the products its bits pick, with no chain from one bit
/// to the next (shift-and-add takes 32 dependent steps, and it was most of `complete`).
#[derive(Clone, Copy)]
struct Shift {
    len: usize,
    terms: [u32; 32],
}

impl Shift {
    fn new(len: usize) -> Shift {
        let mut terms = [x8n(len); 32];
        for i in 1..32 {
            let t = terms[i - 1];
            terms[i] = (t >> 1) ^ (POLY & (t & 1).wrapping_neg()); // times x
        }
        Shift { len, terms }
    }

    /// `a` times x^(8 * len) mod P.
    fn apply(&self, a: u32) -> u32 {
        let mut p = 0;
        for (i, t) in self.terms.iter().enumerate() {
            p ^= t & ((a >> (31 - i)) & 1).wrapping_neg();
        }
        p
    }
}

/// `a` moved past `len` zero bytes, with [`Shift`]s remembered for the lengths a thread
/// last used: a stream's packets come in two or three lengths (first, middle, last).
fn shift_by(a: u32, len: usize) -> u32 {
    const WAYS: usize = 8;
    thread_local! {
        static SHIFTS: std::cell::RefCell<[Option<Shift>; WAYS]> =
            const { std::cell::RefCell::new([None; WAYS]) };
    }
    // Transport lengths are multiples of 4 (the pad).
    SHIFTS.with_borrow_mut(|s| {
        let slot = &mut s[(len / 4) % WAYS];
        match slot {
            Some(sh) if sh.len == len => sh.apply(a),
            _ => slot.insert(Shift::new(len)).apply(a),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::{compute, fill, ipv4_udp_header, ipv6_udp_header, verify};
    use proptest::prelude::*;

    #[test]
    fn shifting_by_zero_bytes_and_by_sums() {
        assert_eq!(x8n(0), X0);
        assert_eq!(x8n(1), X8);
        // Moving by a then by b is moving by a + b.
        for (a, b) in [(3, 5), (4096, 28), (1, 65535)] {
            assert_eq!(multiply(x8n(a), x8n(b)), x8n(a + b));
        }
    }

    #[test]
    fn fold_keys_are_the_published_ones() {
        // Intel's white paper (CRC-32, gzip): fold by 4 x 128 bits (k1, k2) and by 128 (k3, k4).
        assert_eq!(fold_keys(512), (0x1_5444_2bd4, 0x1_c6e4_1596));
        assert_eq!(fold_keys(128), (0x1_7519_97d0, 0x0_ccaa_009e));
    }

    #[test]
    fn cached_shifts_match_fresh_ones_when_lengths_collide() {
        // 4108 and 4140 share a slot: each must still get its own.
        for (i, len) in [4108, 4140, 4108, 36, 4140, 516].into_iter().enumerate() {
            let a = 0x9e37_79b9u32.rotate_left(i as u32);
            assert_eq!(shift_by(a, len), multiply(a, x8n(len)));
        }
    }

    proptest! {
        /// The two halves give the ICRC the whole packet gives, for either IP version and
        /// any length, and a changed payload byte or IPv4 ID changes it.
        #[test]
        fn two_halves_make_the_whole(
            payload in proptest::collection::vec(any::<u8>(), 12..9000),
            v6 in any::<bool>(),
            id in any::<u16>(),
            sport in any::<u16>(),
            flip in any::<prop::sample::Index>(),
        ) {
            let mut pkt = payload.clone();
            pkt.extend_from_slice(&[0; ICRC_LEN]);
            let hdr: Vec<u8> = if v6 {
                ipv6_udp_header([0xfd; 16], [0xfe; 16], sport, 4791, pkt.len()).to_vec()
            } else {
                ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], id, sport, 4791, pkt.len()).to_vec()
            };
            prop_assert!(write_part(&mut pkt));
            let icrc = complete(&hdr, &mut pkt).unwrap();
            prop_assert_eq!(icrc, compute(&hdr, &payload).unwrap());
            verify(&hdr, &pkt).unwrap();
            let mut other = pkt.clone();
            let at = flip.index(payload.len());
            other[at] ^= 1;
            let masked = at == 4; // BTH byte 4 (FECN, BECN) is outside the ICRC
            prop_assert_eq!(verify(&hdr, &other).is_ok(), masked);
            // Hashed in two pieces cut anywhere, as a copy that hashes does.
            let cut = 12 + flip.index(payload.len().min(100) - 11);
            let pieces = part_end(hash_more(part_start(&payload[..cut]), &payload[cut..]));
            prop_assert_eq!(pieces, transport_part(&payload));
            // The same packet filled whole.
            let mut whole = pkt.clone();
            fill(&hdr, &mut whole).unwrap();
            prop_assert_eq!(whole, pkt);
        }
    }
}
