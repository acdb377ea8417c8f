//! What a QP offers and agrees to be secure (`oxrdma_core::secure`): an X25519 key pair
//! made when the application asks for a secure endpoint, the public half carried in the
//! [`Endpoint`](crate::Endpoint) it sends its peer, and at connect the keys both ends
//! derive from the agreement (and a pre-shared key, if the options name one).

use crate::error::{Error, Result};
use oxrdma_core::secure::{derive, derive_direction, DirectionKey, End, QpKeys, Suite};
use oxrdma_core::Gid;
use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;
use std::sync::OnceLock;

/// An X25519 public key, as an [`Endpoint`](crate::Endpoint) carries it.
pub type PublicKey = [u8; 32];

/// A key pair offered in an endpoint, kept until the QP connects.
pub(crate) struct Offer {
    private: EphemeralPrivateKey,
    /// The endpoint it was offered in: the key derivation names this end by it.
    pub gid: Gid,
    pub psn: u32,
}

impl std::fmt::Debug for Offer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offer")
            .field("gid", &self.gid)
            .field("psn", &self.psn)
            .finish_non_exhaustive()
    }
}

impl Offer {
    /// A fresh key pair for the endpoint at `gid` sending from `psn`, and its public key.
    pub fn new(gid: Gid, psn: u32) -> Result<(Offer, PublicKey)> {
        let rng = SystemRandom::new();
        let private = EphemeralPrivateKey::generate(&X25519, &rng)
            .map_err(|_| Error::Config("no randomness for an X25519 key".into()))?;
        let public = private
            .compute_public_key()
            .map_err(|_| Error::Config("X25519 public key".into()))?;
        let mut key = [0u8; 32];
        key.copy_from_slice(public.as_ref());
        Ok((Offer { private, gid, psn }, key))
    }
}

/// The keys of QP `qpn`: from the agreement of `offer` with the peer's `public` key, if
/// both ends offered one, then `psk`. `local` names this end when it offered nothing.
pub(crate) fn keys(
    suite: Suite,
    offer: Option<Offer>,
    local: End,
    remote: End,
    public: Option<&PublicKey>,
    psk: Option<&[u8; 32]>,
) -> Result<QpKeys> {
    let mut secret = Vec::with_capacity(64);
    let mut local = local;
    if let (Some(offer), Some(public)) = (offer, public) {
        (local.gid, local.psn) = (offer.gid, offer.psn);
        agree_ephemeral(
            offer.private,
            &UnparsedPublicKey::new(&X25519, public),
            |shared| secret.extend_from_slice(shared),
        )
        .map_err(|_| Error::BadPeer("the peer's X25519 key does not agree".into()))?;
    }
    if let Some(psk) = psk {
        secret.extend_from_slice(psk);
    }
    if secret.is_empty() {
        return Err(Error::Config(
            "a secure QP needs keys from both ends or a PSK".into(),
        ));
    }
    Ok(derive(suite, &secret, &local, &remote))
}

/// The pre-shared key `OXRDMA_SECURE_KEY` names for every RC QP of this process: 64 hex
/// digits, or `file:PATH` to a file holding them. Read once; a malformed one is an error
/// at every use.
pub(crate) fn configured_psk() -> Result<Option<[u8; 32]>> {
    static PSK: OnceLock<std::result::Result<Option<[u8; 32]>, String>> = OnceLock::new();
    PSK.get_or_init(|| {
        let Some(v) = std::env::var_os("OXRDMA_SECURE_KEY") else {
            return Ok(None);
        };
        let v = v.to_string_lossy().into_owned();
        let text = match v.strip_prefix("file:") {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("OXRDMA_SECURE_KEY: cannot read {path}: {e}"))?,
            None => v,
        };
        parse_key(text.trim())
            .map(Some)
            .ok_or_else(|| "OXRDMA_SECURE_KEY: not 64 hex digits (32 bytes)".to_string())
    })
    .clone()
    .map_err(Error::Config)
}

/// 64 hex digits.
pub(crate) fn parse_key(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(k)
}

/// The key of packets from `from` to `to` for a QP keyed from the configured PSK
/// (`QueuePair::modify`): its receive key on the way to RTR (its peer's first PSN is then
/// known), its send key on the way to RTS (its own).
pub(crate) fn psk_direction(psk: &[u8; 32], from: End, to: End) -> DirectionKey {
    derive_direction(Suite::Aes256Gcm, psk, &from, &to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_64_hex_digits() {
        let hex: String = (0..32u8).map(|b| format!("{:02x}", b * 5)).collect();
        let k = parse_key(&hex).unwrap();
        assert_eq!(k[1], 5);
        assert!(parse_key(&hex[1..]).is_none());
        assert!(parse_key(&hex.replace('0', "g")).is_none());
        assert!(parse_key("").is_none());
    }
}
