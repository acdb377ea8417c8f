//! An oxrdma peer's offer to make a connection's RC QPs secure (`oxrdma_core::secure`),
//! carried in the RDMA CM's private data: `OXS`, a suite byte and an X25519 public key (36
//! bytes) in the last bytes of the REQ's private data, and the answer in the same form in
//! the last bytes of the REP's. Both ends derive the QP's keys from the agreement (and a
//! pre-shared key, if one is configured) as the QP moves to RTR and RTS
//! (`secure::key_as_moved`). The application keeps the rest: 20 bytes of a REQ after the
//! CMA header (56 without one), 160 of a REP. A peer that is not oxrdma (rxe) sees 36
//! more bytes of private data and answers nothing, so the QP stays plain RoCEv2. An
//! oxrdma end zeroes the offer before its application sees the private data.

use crate::error::Result;
use crate::secure;
use oxrdma_core::secure::Suite;
use oxrdma_wire::cm::{Rep, Req};

/// An offer's length.
pub(super) const LEN: usize = 36;
const MAGIC: &[u8; 3] = b"OXS";
/// Where the offer sits in a REQ's private data (CMA header included).
pub(super) const IN_REQ: usize = Req::PRIVATE_DATA - LEN;
/// Where the answer sits in a REP's private data.
pub(super) const IN_REP: usize = Rep::PRIVATE_DATA - LEN;

fn suite_byte(s: Suite) -> u8 {
    match s {
        Suite::Aes256Gcm => b'a',
        Suite::ChaCha20Poly1305 => b'c',
        Suite::Aegis128X2 => b'x',
    }
}

/// The half of an agreement kept at this end until the peer's key comes, and the suite
/// it was offered with.
#[derive(Debug)]
pub(super) struct KeyPair {
    pair: secure::KeyPair,
    pub(super) suite: Suite,
}

impl KeyPair {
    /// A fresh key pair, and the offer (or answer) that carries its public key.
    pub(super) fn new(suite: Suite) -> Result<(KeyPair, [u8; LEN])> {
        let (pair, public) = secure::KeyPair::new()?;
        let mut offer = [0u8; LEN];
        offer[..3].copy_from_slice(MAGIC);
        offer[3] = suite_byte(suite);
        offer[4..].copy_from_slice(&public);
        Ok((KeyPair { pair, suite }, offer))
    }

    /// The shared secret with the peer's public key `public`.
    pub(super) fn agree(self, public: &[u8; 32]) -> Result<[u8; 32]> {
        self.pair.agree(public)
    }
}

/// Puts `offer` at `at` in `data`, zeros between; false (nothing changed) if the
/// application's data reaches past `at`.
pub(super) fn place(data: &mut Vec<u8>, at: usize, offer: &[u8; LEN]) -> bool {
    if data.len() > at {
        return false;
    }
    data.resize(at, 0);
    data.extend_from_slice(offer);
    true
}

/// The offer at `at` in `data`, if there is one (its suite and public key), zeroed there.
pub(super) fn take(data: &mut [u8], at: usize) -> Option<(Suite, [u8; 32])> {
    let o = data.get_mut(at..at + LEN)?;
    if &o[..3] != MAGIC {
        return None;
    }
    let suite = match o[3] {
        b'a' => Suite::Aes256Gcm,
        b'c' => Suite::ChaCha20Poly1305,
        b'x' => Suite::Aegis128X2,
        _ => return None,
    };
    let mut public = [0u8; 32];
    public.copy_from_slice(&o[4..]);
    o.fill(0);
    Some((suite, public))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_rides_at_the_tail_and_both_ends_agree() {
        for s in Suite::ALL {
            let (_, offer) = KeyPair::new(s).unwrap();
            let mut wire = [0u8; Req::PRIVATE_DATA];
            wire[IN_REQ..].copy_from_slice(&offer);
            assert_eq!(take(&mut wire, IN_REQ).map(|o| o.0), Some(s), "its suite");
        }
        let (a, offer) = KeyPair::new(Suite::Aes256Gcm).unwrap();
        let mut req = b"user".to_vec();
        assert!(place(&mut req, IN_REQ, &offer));
        assert_eq!(req.len(), Req::PRIVATE_DATA);
        let mut wire = [0u8; Req::PRIVATE_DATA];
        wire.copy_from_slice(&req);
        let (suite, pa) = take(&mut wire, IN_REQ).unwrap();
        assert_eq!(suite, Suite::Aes256Gcm);
        assert_eq!(&wire[..4], b"user");
        assert!(
            wire[4..].iter().all(|&b| b == 0),
            "zeroed for the application"
        );
        assert!(take(&mut wire, IN_REQ).is_none(), "taken once");

        let (b, answer) = KeyPair::new(suite).unwrap();
        let mut rep = vec![7u8; IN_REP];
        assert!(place(&mut rep, IN_REP, &answer));
        let (_, pb) = take(&mut rep, IN_REP).unwrap();
        assert_eq!(a.agree(&pb).unwrap(), b.agree(&pa).unwrap());
    }

    #[test]
    fn no_room_or_no_magic_is_no_offer() {
        let (_, offer) = KeyPair::new(Suite::ChaCha20Poly1305).unwrap();
        let mut long = vec![1u8; IN_REQ + 1];
        assert!(!place(&mut long, IN_REQ, &offer));
        assert_eq!(
            long,
            vec![1u8; IN_REQ + 1],
            "the application's data untouched"
        );
        let mut plain = [0u8; Rep::PRIVATE_DATA];
        assert!(take(&mut plain, IN_REP).is_none());
        let mut odd = [0u8; Rep::PRIVATE_DATA];
        odd[IN_REP..IN_REP + 4].copy_from_slice(b"OXSz");
        assert!(take(&mut odd, IN_REP).is_none(), "an unknown suite");
        assert_eq!(&odd[IN_REP..IN_REP + 4], b"OXSz");
        let (pair, _) = KeyPair::new(Suite::Aes256Gcm).unwrap();
        assert!(pair.agree(&[0u8; 32]).is_err(), "a low-order key");
    }
}
