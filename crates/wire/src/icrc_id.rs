//! Verifying the ICRC of an IPv4 packet whose Identification field is unknown.
//!
//! A receiver on a plain UDP socket never sees the IPv4 header, and the ICRC covers its
//! Identification field (Linux rxe sends non-zero, incrementing IDs). CRC-32 is affine over
//! GF(2): flipping bit k of the ID changes the CRC by a fixed vector D_k that depends only on
//! the packet length. So the ICRC computed with ID 0, XORed with the ICRC carried, must be a
//! combination of the 16 D_k, and the combination *is* the ID. A packet passes when such an
//! ID exists: a weaker check than knowing the ID (a random corruption passes with
//! probability 2^-16 instead of 2^-32), but a real one, and it recovers the sender's ID.

use crate::error::{Result, WireError};
use crate::icrc::{carried, compute, ICRC_LEN};

/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xedb8_8320;

/// One step of the CRC register over a zero byte: r -> table[r & 0xff] ^ (r >> 8).
fn zero_byte(mut r: u32) -> u32 {
    for _ in 0..8 {
        r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
    }
    r
}

/// The register after feeding byte `b` into a zero register.
fn byte_into_zero(b: u8) -> u32 {
    zero_byte(u32::from(b))
}

/// A 32x32 matrix over GF(2), as the images of the 32 unit vectors.
type Matrix = [u32; 32];

fn apply(m: &Matrix, v: u32) -> u32 {
    (0..32)
        .filter(|i| v >> i & 1 != 0)
        .fold(0, |acc, i| acc ^ m[i])
}

fn compose(a: &Matrix, b: &Matrix) -> Matrix {
    // (a ∘ b)(e_i) = a(b(e_i))
    std::array::from_fn(|i| apply(a, b[i]))
}

/// The linear map "feed n zero bytes".
fn zeros(mut n: usize) -> Matrix {
    let mut result: Matrix = std::array::from_fn(|i| 1 << i);
    let mut step: Matrix = std::array::from_fn(|i| zero_byte(1 << i));
    while n > 0 {
        if n & 1 != 0 {
            result = compose(&step, &result);
        }
        step = compose(&step, &step);
        n >>= 1;
    }
    result
}

/// Offset of the IPv4 Identification's first byte in the ICRC input (after 8 bytes of ones).
const ID_AT: usize = 8 + 4;

/// The change in ICRC caused by each of the 16 ID bits (index k = bit k of the ID), for a
/// packet whose ICRC input is `len` bytes long.
fn id_deltas(len: usize) -> [u32; 16] {
    let tail = zeros(len - ID_AT - 2);
    std::array::from_fn(|k| {
        let (byte, bit) = if k < 8 { (1, k) } else { (0, k - 8) };
        let r = byte_into_zero(1 << bit);
        // The high byte (offset 12) is followed by the low byte before the tail.
        let r = if byte == 0 { zero_byte(r) } else { r };
        apply(&tail, r)
    })
}

/// The deltas of one packet length in reduced (echelon) form, each row with the ID bits
/// that make it up: solving a syndrome against them is 16 steps.
#[derive(Debug, Clone)]
struct Basis(Vec<(u32, u16)>);

impl Basis {
    fn new(deltas: [u32; 16]) -> Basis {
        // Gaussian elimination, tracking which ID bits make up each reduced row.
        let mut rows: Vec<(u32, u16)> = Vec::with_capacity(16);
        for (k, &d) in deltas.iter().enumerate() {
            let mut v = (d, 1u16 << k);
            for &(r, m) in &rows {
                if v.0 ^ r < v.0 {
                    v = (v.0 ^ r, v.1 ^ m);
                }
            }
            if v.0 != 0 {
                rows.push(v);
            }
        }
        Basis(rows)
    }

    /// The ID whose deltas XOR to `syndrome`, if there is one.
    fn solve(&self, syndrome: u32) -> Option<u16> {
        let (rest, id) = self.reduce(syndrome);
        (rest == 0).then_some(id)
    }

    /// Reduces `syndrome` by the rows: what is left, and the ID bits of the rows taken.
    fn reduce(&self, syndrome: u32) -> (u32, u16) {
        let mut s = (syndrome, 0u16);
        // Without branches: which rows apply is as random as the ID (rxe's IDs count up),
        // and the mispredictions cost more than the rest (rdtsc, IDs changing every
        // packet: the receive check 364-520 -> 286-338 cycles).
        for &(r, m) in &self.0 {
            let take = u32::from(s.0 ^ r < s.0).wrapping_neg();
            s = (s.0 ^ (r & take), s.1 ^ (m & take as u16));
        }
        s
    }
}

/// [`Basis::solve`] in four table lookups. Each step of the reduction adds a row to the
/// syndrome if one of its bits is set, a linear map over GF(2); so the whole reduction,
/// what is left and the ID bits taken, is linear in the syndrome: the XOR of what it gives
/// for each set bit. A table per syndrome byte holds that XOR for each of its 256 values.
#[derive(Debug, Clone)]
struct Solver(Box<[[u64; 256]; 4]>);

impl Solver {
    fn new(basis: &Basis) -> Solver {
        let mut t = Box::new([[0u64; 256]; 4]);
        for (k, table) in t.iter_mut().enumerate() {
            // What each bit of this byte reduces to, once.
            let bits: [u64; 8] = std::array::from_fn(|i| {
                let (rest, id) = basis.reduce(1 << (8 * k + i));
                u64::from(rest) | u64::from(id) << 32
            });
            for b in 1..256usize {
                // The entry without b's lowest bit, and that bit's reduction.
                table[b] = table[b & (b - 1)] ^ bits[b.trailing_zeros() as usize];
            }
        }
        Solver(t)
    }

    /// As [`Basis::solve`].
    fn solve(&self, syndrome: u32) -> Option<u16> {
        let [b0, b1, b2, b3] = syndrome.to_le_bytes();
        let t = &self.0;
        let v = t[0][usize::from(b0)]
            ^ t[1][usize::from(b1)]
            ^ t[2][usize::from(b2)]
            ^ t[3][usize::from(b3)];
        (v as u32 == 0).then_some((v >> 32) as u16)
    }
}

/// [`verify_ipv4_any_id`] for a stream of packets: what it works out per packet length
/// (costly: a matrix power) is kept for the next packets of that length. Packets come in
/// few lengths (full MTU segments, their first and last, ACKs), so a few entries serve.
#[derive(Debug, Default)]
pub struct IdVerifier {
    /// (ICRC input length, its solver), most recently used first.
    bases: Vec<(usize, Solver)>,
}

/// Lengths an [`IdVerifier`] remembers.
const LENGTHS_KEPT: usize = 8;

impl IdVerifier {
    /// As [`verify_ipv4_any_id`].
    pub fn verify(&mut self, ip_udp: &[u8], udp_payload: &[u8]) -> Result<u16> {
        let (computed, carried, len) = match check_id_zero(ip_udp, udp_payload)? {
            Ok(()) => return Ok(0),
            Err(x) => x,
        };
        let at = match self.bases.iter().position(|(l, _)| *l == len) {
            Some(at) => at,
            None => {
                self.bases.truncate(LENGTHS_KEPT - 1);
                let solver = Solver::new(&Basis::new(id_deltas(len)));
                self.bases.insert(0, (len, solver));
                0
            }
        };
        let id = self.bases[at].1.solve(computed ^ carried);
        if at > 0 {
            let e = self.bases.remove(at);
            self.bases.insert(0, e);
        }
        id.ok_or(WireError::IcrcMismatch { computed, carried })
    }
}

/// The ICRC with ID 0 checked: `Ok(Ok(()))` if it is right, else what solving the ID
/// needs: the ICRC computed with ID 0, the one carried, and the ICRC input's length.
#[allow(clippy::type_complexity)]
fn check_id_zero(
    ip_udp: &[u8],
    udp_payload: &[u8],
) -> Result<core::result::Result<(), (u32, u32, usize)>> {
    if ip_udp.first().is_none_or(|b| b >> 4 != 4) {
        return Err(WireError::BadIpHeader("not IPv4"));
    }
    let carried = carried(udp_payload)?;
    let n = ip_udp.len().min(68);
    let hdr;
    let ip_udp = if ip_udp.get(4..6).is_none_or(|id| id == [0, 0]) {
        // Its ID is 0 already (a receiver's headers, built once per run): used as it is.
        &ip_udp[..n]
    } else {
        let mut h = [0u8; 68];
        h[..n].copy_from_slice(&ip_udp[..n]);
        h[4..6].fill(0);
        hdr = h;
        &hdr[..n]
    };
    let computed = compute(ip_udp, &udp_payload[..udp_payload.len() - ICRC_LEN])?;
    if computed == carried {
        // ID 0, as an unconnected Linux socket with IP_PMTUDISC_DO sends a lone packet.
        return Ok(Ok(()));
    }
    Ok(Err((
        computed,
        carried,
        8 + n + udp_payload.len() - ICRC_LEN,
    )))
}

/// Verifies the ICRC of `udp_payload` (BTH through ICRC) against an IPv4+UDP header whose
/// Identification field is unknown (its value in `ip_udp` is ignored). Returns the only ID
/// that makes the ICRC right.
pub fn verify_ipv4_any_id(ip_udp: &[u8], udp_payload: &[u8]) -> Result<u16> {
    match check_id_zero(ip_udp, udp_payload)? {
        Ok(()) => Ok(0),
        Err((computed, carried, len)) => Basis::new(id_deltas(len))
            .solve(computed ^ carried)
            .ok_or(WireError::IcrcMismatch { computed, carried }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::{fill, ipv4_udp_header};

    #[test]
    fn recovers_the_id_the_sender_used() {
        let mut v = IdVerifier::default();
        for (id, len) in [
            (0u16, 16usize),
            (1, 16),
            (0xbeef, 1040),
            (53532, 4108),
            (0xffff, 28),
        ] {
            let mut pkt = vec![0u8; len];
            pkt[0] = 0x04;
            pkt[2..4].fill(0xff);
            for (i, b) in pkt[12..len - 4].iter_mut().enumerate() {
                *b = i as u8;
            }
            let hdr = ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], id, 49152, 4791, len);
            fill(&hdr, &mut pkt).unwrap();
            let other = ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 1234, 49152, 4791, len);
            assert_eq!(verify_ipv4_any_id(&other, &pkt), Ok(id));
            // The same, twice, through a verifier that keeps what it worked out.
            assert_eq!(v.verify(&other, &pkt), Ok(id));
            assert_eq!(v.verify(&other, &pkt), Ok(id));
            // A flipped payload bit is caught (a single-bit error never looks like an ID).
            pkt[len - 5] ^= 0x10;
            assert!(verify_ipv4_any_id(&other, &pkt).is_err());
            assert!(v.verify(&other, &pkt).is_err());
        }
    }

    #[test]
    fn the_tables_solve_as_the_rows_do() {
        // Syndromes that an ID explains and random ones (most of which none does), for a
        // few lengths: the table lookups agree with the reduction every time.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in [28usize, 76, 1076, 4148] {
            let deltas = id_deltas(len);
            let basis = Basis::new(deltas);
            let solver = Solver::new(&basis);
            for _ in 0..2000 {
                let id = next() as u16;
                let explained = (0..16)
                    .filter(|k| id >> k & 1 != 0)
                    .fold(0, |a, k| a ^ deltas[k]);
                assert_eq!(solver.solve(explained), Some(id), "len {len} id {id}");
                let random = next() as u32;
                assert_eq!(solver.solve(random), basis.solve(random), "len {len}");
            }
        }
    }

    #[test]
    fn zeros_matrix_matches_stepping() {
        let m = zeros(37);
        let mut r = 0x1234_5678;
        let fast = apply(&m, r);
        for _ in 0..37 {
            r = zero_byte(r);
        }
        assert_eq!(fast, r);
    }
}
