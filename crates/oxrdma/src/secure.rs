//! What a QP offers and agrees to be secure (`oxrdma_core::secure`): an X25519 key pair
//! made when the application asks for a secure endpoint, the public half carried in the
//! [`Endpoint`](crate::Endpoint) it sends its peer, and at connect the keys both ends
//! derive from the agreement (and a pre-shared key, if the options name one).

use crate::error::{Error, Result};
use oxrdma_core::secure::{derive, End, QpKeys, Suite};
use oxrdma_core::Gid;
use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;

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
