//! What a QP offers and agrees to be secure (`oxrdma_core::secure`): an X25519 key pair
//! made when the application asks for a secure endpoint, the public half carried in the
//! [`Endpoint`](crate::Endpoint) it sends its peer, and at connect the keys both ends
//! derive from the agreement (and a pre-shared key, if the options name one).

use crate::error::{Error, Result};
use oxrdma_core::secure::{derive, derive_direction, derive_reply, End, QpKeys, Suite};
use oxrdma_core::Gid;
use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;
use std::sync::OnceLock;

/// An X25519 public key, as an [`Endpoint`](crate::Endpoint) carries it.
pub type PublicKey = [u8; 32];

/// An X25519 key pair: the private half, kept until the peer's public key comes (an
/// endpoint's offer, or the RDMA CM's, `cm/keys.rs`).
pub(crate) struct KeyPair(EphemeralPrivateKey);

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPair(..)")
    }
}

impl KeyPair {
    /// A fresh key pair from the OS's randomness, and its public key.
    pub fn new() -> Result<(KeyPair, PublicKey)> {
        let private = EphemeralPrivateKey::generate(&X25519, &SystemRandom::new())
            .map_err(|_| Error::Config("no randomness for an X25519 key".into()))?;
        let public = private
            .compute_public_key()
            .map_err(|_| Error::Config("X25519 public key".into()))?;
        let mut key = [0u8; 32];
        key.copy_from_slice(public.as_ref());
        Ok((KeyPair(private), key))
    }

    /// The shared secret with the peer's public key `public`.
    pub fn agree(self, public: &PublicKey) -> Result<[u8; 32]> {
        let mut secret = [0u8; 32];
        agree_ephemeral(self.0, &UnparsedPublicKey::new(&X25519, public), |s| {
            secret.copy_from_slice(s)
        })
        .map_err(|_| Error::BadPeer("the peer's X25519 key does not agree".into()))?;
        Ok(secret)
    }
}

/// A key pair offered in an endpoint, kept until the QP connects.
#[derive(Debug)]
pub(crate) struct Offer {
    pair: KeyPair,
    /// The GID of the endpoint it was offered in: the key derivation names this end by it.
    pub gid: Gid,
}

impl Offer {
    /// A fresh key pair for the endpoint at `gid`, and its public key.
    pub fn new(gid: Gid) -> Result<(Offer, PublicKey)> {
        let (pair, key) = KeyPair::new()?;
        Ok((Offer { pair, gid }, key))
    }
}

/// A random number from the OS's CSPRNG (a PSN for an rdma-core QP).
pub(crate) fn random_u32() -> u32 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 4];
    // The OS's generator fails only if the kernel has none (then any value will do: the
    // PSN is not a secret, only hard to guess).
    let _ = SystemRandom::new().fill(&mut b);
    u32::from_le_bytes(b)
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
        local.gid = offer.gid;
        secret.extend_from_slice(&offer.pair.agree(public)?);
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

/// Whether this process's RDMA CM connections offer, answer or insist on keys agreed in
/// their private data (`cm/keys.rs`): `OXRDMA_SECURE=off|answer|offer|require`, or
/// [`CmId::set_secure`](crate::cm::CmId::set_secure) for one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecureMode {
    /// Neither offer keys nor answer a peer's offer: always plain RoCEv2 (unless
    /// `OXRDMA_SECURE_KEY` keys the QP).
    Off,
    /// Answer a peer's offer (its QP and ours become secure); offer none. The default: an
    /// oxrdma peer that asks gets its secure QP, and rxe peers never see an offer.
    #[default]
    Answer,
    /// Offer keys in every request and answer offers; plain with a peer that does not
    /// answer (rxe, or an oxrdma process with `off`).
    Offer,
    /// Offer and answer, and refuse a connection whose QP would not be secure (its QP's
    /// move to RTR fails; the peer is rejected).
    Require,
}

impl SecureMode {
    /// Whether a connection's REQ carries an offer.
    pub fn offers(self) -> bool {
        matches!(self, SecureMode::Offer | SecureMode::Require)
    }

    /// `off`, `answer`, `offer` or `require`.
    pub fn parse(s: &str) -> Option<SecureMode> {
        Some(match s {
            "off" | "0" => SecureMode::Off,
            "answer" => SecureMode::Answer,
            "offer" | "1" => SecureMode::Offer,
            "require" => SecureMode::Require,
            _ => return None,
        })
    }
}

/// `OXRDMA_SECURE` (`SecureMode`). Read once; a malformed one is an error at every use.
pub(crate) fn configured_mode() -> Result<SecureMode> {
    static MODE: OnceLock<std::result::Result<SecureMode, String>> = OnceLock::new();
    MODE.get_or_init(|| match std::env::var("OXRDMA_SECURE") {
        Err(_) => Ok(SecureMode::default()),
        Ok(v) => SecureMode::parse(v.trim())
            .ok_or_else(|| format!("OXRDMA_SECURE: `{v}` is not off, answer, offer or require")),
    })
    .clone()
    .map_err(Error::Config)
}

/// `OXRDMA_SECURE_SUITE`: the AEAD this process's RDMA CM offers and its pre-shared key
/// seals with (`aegis-128x2`, the default; `aes-256-gcm`; `chacha20-poly1305`). Read
/// once; a malformed one is an error at every use.
pub(crate) fn configured_suite() -> Result<Suite> {
    static SUITE: OnceLock<std::result::Result<Suite, String>> = OnceLock::new();
    SUITE
        .get_or_init(|| match std::env::var("OXRDMA_SECURE_SUITE") {
            Err(_) => Ok(Suite::default()),
            Ok(v) => Suite::parse(v.trim()).ok_or_else(|| {
                format!(
                    "OXRDMA_SECURE_SUITE: `{v}` is not aegis-128x2, aes-256-gcm or \
                     chacha20-poly1305"
                )
            }),
        })
        .clone()
        .map_err(Error::Config)
}

/// What the RDMA CM agreed for a QP (`Shared::agreed`, by QPN), for its moves to key it.
#[derive(Clone)]
pub(crate) struct Agreed {
    pub suite: Suite,
    /// The X25519 shared secret, if both ends offered keys.
    pub secret: Option<[u8; 32]>,
    /// Refuse to be plain.
    pub require: bool,
}

/// Keys QP `qpn` as it stands after a move, if it is to be secure: from what the RDMA CM
/// agreed for it (`agreed`) and the configured PSK (if its peer is among
/// `OXRDMA_SECURE_PEERS`), its receive key at RTR (its peer's first PSN is then known), its
/// send key at RTS (its own). A QP that must be secure and cannot be goes to ERR, and the
/// move is an error. Call with the device locked across the move and this, so no packet
/// comes or goes between them.
pub(crate) fn key_as_moved(
    gids: &[Gid],
    engine: &mut oxrdma_core::Engine,
    qpn: u32,
    agreed: Option<Agreed>,
) -> Result<()> {
    use oxrdma_core::QpState::{Rtr, Rts};
    let secured = engine.qp_secure(qpn)?;
    if secured == Some(true) {
        return Ok(());
    }
    let (now, _, _) = engine.query_qp(qpn)?;
    let (Some(state @ (Rtr | Rts)), Some(av), Some(dest)) =
        (now.qp_state, now.ah_attr, now.dest_qp_num)
    else {
        return Ok(());
    };
    let mut secret = Vec::with_capacity(64);
    let suite = match agreed.as_ref() {
        Some(a) => a.suite,
        None => configured_suite()?,
    };
    if let Some(s) = agreed.as_ref().and_then(|a| a.secret) {
        secret.extend_from_slice(&s);
    }
    if let Some(psk) = configured_psk()? {
        if psk_peer(av.dgid)? {
            secret.extend_from_slice(&psk);
        }
    }
    let require =
        agreed.as_ref().is_some_and(|a| a.require) || configured_mode()? == SecureMode::Require;
    // A QP takes its receive key before it sends (RTR), its send key after.
    let keyable = matches!((state, secured), (Rtr, None) | (Rts, Some(false)));
    if secret.is_empty() || !keyable {
        if require && secured.is_none() {
            let err = oxrdma_core::QpAttr {
                qp_state: Some(oxrdma_core::QpState::Err),
                ..Default::default()
            };
            let _ = engine.modify_qp(qpn, &err);
            return Err(Error::BadPeer(
                "not secure: the peer agreed no keys and no PSK names it (OXRDMA_SECURE=require)"
                    .into(),
            ));
        }
        return Ok(());
    }
    let gid = gids.get(usize::from(av.sgid_index)).copied();
    let me = |psn| End {
        gid: gid.unwrap_or_default(),
        qpn,
        psn,
    };
    let peer = |psn| End {
        gid: av.dgid,
        qpn: dest,
        psn,
    };
    // At RTR the peer's first PSN is known: the keys of the packets in its PSN space, its
    // requests in and our replies out (a QP left in RTR still answers); at RTS our own
    // first PSN: our requests out, and the peer's replies from before it had its send key.
    if secured.is_none() {
        let psn = now.rq_psn.unwrap_or_default();
        let key = derive_direction(suite, &secret, &peer(psn), &me(0));
        let reply = derive_reply(suite, &secret, &me(0), &peer(psn));
        engine.secure_qp_recv(qpn, suite, &key, &reply)?;
    }
    if state == Rts {
        let psn = now.sq_psn.unwrap_or_default();
        let key = derive_direction(suite, &secret, &me(psn), &peer(0));
        let reply = derive_reply(suite, &secret, &peer(0), &me(psn));
        engine.secure_qp_send(qpn, &key, &reply)?;
    }
    Ok(())
}

/// The peers `OXRDMA_SECURE_PEERS` names (`10.0.0.0/8,fd00::/16,192.0.2.7`): a QP keyed
/// from `OXRDMA_SECURE_KEY` is keyed only if its peer is among them, and stays plain RoCEv2
/// to the rest (rxe hosts, say). None: unset, every peer. Read once; a malformed one is an
/// error at every use.
pub(crate) fn configured_peers() -> Result<Option<&'static [Net]>> {
    static PEERS: OnceLock<std::result::Result<Option<Vec<Net>>, String>> = OnceLock::new();
    PEERS
        .get_or_init(|| match std::env::var("OXRDMA_SECURE_PEERS") {
            Err(_) => Ok(None),
            Ok(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    Net::parse(s).ok_or_else(|| {
                        format!("OXRDMA_SECURE_PEERS: `{s}` is not an address or a prefix")
                    })
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map(Some),
        })
        .as_ref()
        .map(Option::as_deref)
        .map_err(|e| Error::Config(e.clone()))
}

/// Whether a QP to `gid` is keyed from `OXRDMA_SECURE_KEY` (`configured_peers`).
pub(crate) fn psk_peer(gid: Gid) -> Result<bool> {
    Ok(configured_peers()?.is_none_or(|p| p.iter().any(|n| n.holds(gid.ip()))))
}

/// An address prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Net {
    addr: std::net::IpAddr,
    bits: u8,
}

impl Net {
    /// `a.b.c.d/n`, `x::y/n`, or an address alone.
    pub(crate) fn parse(s: &str) -> Option<Net> {
        let (a, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().ok()?)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        (bits <= max).then_some(Net { addr, bits })
    }

    /// Whether `ip` is in it (an IPv4 address given as IPv4-mapped IPv6 too).
    pub(crate) fn holds(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr::{V4, V6};
        let ip = match ip {
            V6(v6) => v6.to_ipv4_mapped().map_or(ip, V4),
            v4 => v4,
        };
        let (a, b, len) = match (self.addr, ip) {
            (V4(a), V4(b)) => (
                u128::from(u32::from(a)) << 96,
                u128::from(u32::from(b)) << 96,
                32,
            ),
            (V6(a), V6(b)) => (u128::from(a), u128::from(b), 128),
            _ => return false,
        };
        let bits = u32::from(self.bits.min(len));
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - bits)
        };
        a & mask == b & mask
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_addresses_and_prefixes() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let n = Net::parse("10.0.0.0/8").unwrap();
        assert!(n.holds(ip("10.200.1.2")) && !n.holds(ip("11.0.0.1")));
        assert!(n.holds(ip("::ffff:10.1.2.3")), "an IPv4 GID");
        assert!(!n.holds(ip("fd00::1")));
        let one = Net::parse("192.0.2.7").unwrap();
        assert!(one.holds(ip("192.0.2.7")) && !one.holds(ip("192.0.2.8")));
        let v6 = Net::parse("fd00::/16").unwrap();
        assert!(v6.holds(ip("fd00:1::5")) && !v6.holds(ip("fe80::1")));
        assert!(Net::parse("0.0.0.0/0").unwrap().holds(ip("1.2.3.4")));
        for bad in ["10.0.0.0/33", "fd00::/129", "10.0.0", "x/8", "10.0.0.0/"] {
            assert!(Net::parse(bad).is_none(), "{bad}");
        }
    }

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
