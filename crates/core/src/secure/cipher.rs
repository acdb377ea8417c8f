//! The AEADs behind a secure QP's suites, behind one seal and one open: ring's AES-256-GCM
//! and ChaCha20-Poly1305, and the `aegis` crate's AEGIS-128X2.

use super::Suite;
use aegis::aegis128x2::Aegis128X2;
use ring::aead::{self, Aad, LessSafeKey, Nonce, Tag, UnboundKey};

/// The tag every suite appends.
pub(super) const TAG_LEN: usize = 16;

/// An epoch's key, ready to seal and open with.
pub(super) enum Cipher {
    Ring(Box<LessSafeKey>),
    /// AEGIS takes its key as it is: nothing to schedule.
    Aegis128X2([u8; 16]),
}

impl Cipher {
    /// The cipher of `suite` under `key` (the first 16 bytes for a 128-bit suite).
    pub(super) fn new(suite: Suite, key: &[u8; 32]) -> Cipher {
        let ring = |alg: &'static aead::Algorithm| {
            let key = UnboundKey::new(alg, key).expect("a 32-byte key");
            Cipher::Ring(Box::new(LessSafeKey::new(key)))
        };
        match suite {
            Suite::Aes256Gcm => ring(&aead::AES_256_GCM),
            Suite::ChaCha20Poly1305 => ring(&aead::CHACHA20_POLY1305),
            Suite::Aegis128X2 => {
                let mut k = [0u8; 16];
                k.copy_from_slice(&key[..16]);
                Cipher::Aegis128X2(k)
            }
        }
    }

    /// Encrypts `body` in place under the nonce of `iv` and `seq`, authenticating `aad`
    /// with it; returns the tag.
    pub(super) fn seal(&self, iv: &[u8; 12], seq: u64, aad: &[u8], body: &mut [u8]) -> [u8; 16] {
        match self {
            Cipher::Ring(k) => {
                let tag = k
                    .seal_in_place_separate_tag(ring_nonce(iv, seq), Aad::from(aad), body)
                    .expect("a packet is far below the AEAD's limit");
                let mut t = [0u8; TAG_LEN];
                t.copy_from_slice(tag.as_ref());
                t
            }
            Cipher::Aegis128X2(k) => {
                Aegis128X2::<TAG_LEN>::new(k, &aegis_nonce(iv, seq)).encrypt_in_place(body, aad)
            }
        }
    }

    /// Checks `tag` over `sealed` and `aad` and writes `sealed` decrypted to `out` (as
    /// long); false if it does not verify (`out` then holds nothing to use).
    pub(super) fn open(
        &self,
        iv: &[u8; 12],
        seq: u64,
        aad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        out.copy_from_slice(sealed);
        match self {
            Cipher::Ring(k) => k
                .open_in_place_separate_tag(
                    ring_nonce(iv, seq),
                    Aad::from(aad),
                    Tag::from(*tag),
                    out,
                    0..,
                )
                .is_ok(),
            Cipher::Aegis128X2(k) => Aegis128X2::<TAG_LEN>::new(k, &aegis_nonce(iv, seq))
                .decrypt_in_place(out, tag, aad)
                .is_ok(),
        }
    }
}

/// The IV with the sequence number folded into its last eight bytes: unique per packet.
fn folded(iv: &[u8; 12], seq: u64) -> [u8; 12] {
    let mut n = *iv;
    for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
        *b ^= s;
    }
    n
}

fn ring_nonce(iv: &[u8; 12], seq: u64) -> Nonce {
    Nonce::assume_unique_for_key(folded(iv, seq))
}

/// AEGIS-128X2's 16-byte nonce: the folded IV, then zeros.
fn aegis_nonce(iv: &[u8; 12], seq: u64) -> [u8; 16] {
    let mut n = [0u8; 16];
    n[..12].copy_from_slice(&folded(iv, seq));
    n
}
