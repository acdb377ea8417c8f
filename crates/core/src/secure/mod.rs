//! Authenticated and encrypted QPs between oxrdma peers. Every packet a secure QP sends
//! keeps its BTH in the clear (the network and the receiver's demultiplexing need the QPN;
//! the opcode and PSN ride along) and encrypts everything after it: the RETH with its rkey
//! and address, the AETH, the payload. A trailer follows: the packet's sequence number
//! under its key (8 bytes, in the clear) and the AEAD's tag (16 bytes); the ICRC stays
//! last, as RoCEv2 has it. The BTH (its byte 4 masked, as the ICRC masks it) and the
//! sequence number are authenticated with the rest.
//!
//! ```text
//! | BTH 12 | ext. headers, payload, pad (encrypted) | sequence 8 | tag 16 | ICRC 4 |
//! ```
//!
//! Keys are one per direction per connection, derived by HKDF-SHA256 from a secret both
//! ends hold (an X25519 agreement, a pre-shared key, or both), both ends' GIDs and QPNs and
//! the sender's first PSN (what both ends know of a direction by the time the receiver
//! enters RTR: a QP keyed from a pre-shared key takes its receive key then and its send
//! key at RTS). A QP without its send key replies (ACKs, READ and atomic responses,
//! packets in its peer's PSN space) under a reply key of its own, derived from its peer's
//! first PSN, which it knows at RTR and its peer knows before it asks for anything: a QP
//! a program leaves in RTR still answers. Its packets carry the sequence number's top bit,
//! and have their own numbers and window. The sequence number's
//! high bits are the key epoch: every 2^24 packets a direction's key is replaced by one
//! derived from it (a ratchet), and the receiver keeps the previous epoch's key only for
//! packets still on their way. The nonce is the epoch's IV with the sequence number
//! folded in: a sender never uses a number twice (retransmissions are new packets), and
//! the receiver's window (`replay`) takes each number once. A packet that fails is
//! dropped and counted before anything of it is read.

mod cipher;
mod replay;
mod streams;

use crate::gid::Gid;
use cipher::TAG_LEN;
use ring::hkdf;
use streams::{Inbound, Outbound};

/// What the trailer adds to each packet: the sequence number and the tag.
pub const TRAILER: usize = SEQ_LEN + TAG_LEN;
const SEQ_LEN: usize = 8;
const BTH_LEN: usize = 12;
const ICRC_LEN: usize = 4;

/// The AEAD a secure QP uses. The default is AEGIS-128X2, the fastest where AES has
/// hardware help; AES-256-GCM for a 256-bit key or a NIST-approved cipher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Suite {
    /// AES-256-GCM (AES-NI and carry-less multiplication on x86-64).
    Aes256Gcm,
    /// ChaCha20-Poly1305 (faster where AES has no hardware help).
    ChaCha20Poly1305,
    /// AEGIS-128X2 (the CFRG's AEGIS family, built on the AES round instruction): about
    /// four times AES-256-GCM's speed on 4 KiB packets where AES has hardware help.
    #[default]
    Aegis128X2,
}

impl Suite {
    /// Every suite.
    pub const ALL: [Suite; 3] = [Suite::Aegis128X2, Suite::Aes256Gcm, Suite::ChaCha20Poly1305];

    /// The suite a name gives (`aegis-128x2`, `aes-256-gcm`, `chacha20-poly1305`).
    pub fn parse(name: &str) -> Option<Suite> {
        Suite::ALL
            .into_iter()
            .find(|s| s.label() == name.as_bytes())
    }

    /// Its name, as `parse` takes it.
    pub fn name(self) -> &'static str {
        std::str::from_utf8(self.label()).expect("ASCII")
    }

    fn label(self) -> &'static [u8] {
        match self {
            Suite::Aes256Gcm => b"aes-256-gcm",
            Suite::ChaCha20Poly1305 => b"chacha20-poly1305",
            Suite::Aegis128X2 => b"aegis-128x2",
        }
    }
}

/// One end of a connection as the key derivation names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// The end's GID.
    pub gid: Gid,
    /// The end's QP number.
    pub qpn: u32,
    /// The PSN it sends from first (a direction's key takes its sender's).
    pub psn: u32,
}

/// A direction's key and IV.
#[derive(Clone, PartialEq, Eq)]
pub struct DirectionKey {
    key: [u8; 32],
    iv: [u8; 12],
}

impl std::fmt::Debug for DirectionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirectionKey(..)")
    }
}

/// What a QP needs to be secure: the suite and the keys it sends and receives with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpKeys {
    /// The AEAD cipher suite.
    pub suite: Suite,
    /// The key the QP seals the packets it sends with.
    pub send: DirectionKey,
    /// The key the QP opens the packets it receives with.
    pub recv: DirectionKey,
    /// The key it replies under before it has its send key (`derive_reply`).
    pub reply_send: DirectionKey,
    /// The key its peer replies under before the peer has its send key.
    pub reply_recv: DirectionKey,
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn prk(secret: &[u8]) -> hkdf::Prk {
    hkdf::Salt::new(hkdf::HKDF_SHA256, b"oxrdma secure QP 1").extract(secret)
}

/// A direction's two streams: all its packets once the sender has its send key, and the
/// replies it sends before.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stream {
    Packets,
    Replies,
}

/// The key and IV for packets from `from` to `to` in `stream`: under `from`'s first PSN
/// (`Packets`), or under `to`'s (`Replies`).
fn direction(suite: Suite, prk: &hkdf::Prk, stream: Stream, from: &End, to: &End) -> DirectionKey {
    let num = |e: &End, psn: bool| {
        let mut b = [0u8; 24];
        b[..16].copy_from_slice(&e.gid.0);
        b[16..20].copy_from_slice(&e.qpn.to_be_bytes());
        if psn {
            b[20..].copy_from_slice(&e.psn.to_be_bytes());
        }
        b
    };
    let replies = stream == Stream::Replies;
    let (f, t) = (num(from, !replies), num(to, replies));
    let label: &[u8] = if replies {
        b"oxrdma replies"
    } else {
        b"oxrdma packets"
    };
    let info: [&[u8]; 4] = [label, suite.label(), &f, &t];
    let mut out = [0u8; 44];
    prk.expand(&info, Len(44))
        .and_then(|okm| okm.fill(&mut out))
        .expect("44 bytes are within HKDF-SHA256's reach");
    let (mut key, mut iv) = ([0u8; 32], [0u8; 12]);
    key.copy_from_slice(&out[..32]);
    iv.copy_from_slice(&out[32..]);
    DirectionKey { key, iv }
}

/// The keys of the QP at `local` connected to `remote`, from `secret` (an X25519 shared
/// secret, a pre-shared key, or the two one after the other): the same secret at the other
/// end gives it the same keys, send and receive swapped.
pub fn derive(suite: Suite, secret: &[u8], local: &End, remote: &End) -> QpKeys {
    let prk = prk(secret);
    QpKeys {
        suite,
        send: direction(suite, &prk, Stream::Packets, local, remote),
        recv: direction(suite, &prk, Stream::Packets, remote, local),
        reply_send: direction(suite, &prk, Stream::Replies, local, remote),
        reply_recv: direction(suite, &prk, Stream::Replies, remote, local),
    }
}

/// The key of one direction alone, from `secret`: packets from `from` to `to` (`to`'s PSN
/// does not enter it).
pub fn derive_direction(suite: Suite, secret: &[u8], from: &End, to: &End) -> DirectionKey {
    direction(suite, &prk(secret), Stream::Packets, from, to)
}

/// The key `from` replies to `to` under (ACKs, READ and atomic responses: packets in
/// `to`'s PSN space) before `from` has its send key, from `secret`: under `to`'s first
/// PSN, which `from` knows at RTR (its `rq_psn`), as `to` does (its own) by the time it
/// asks for anything. A QP a program leaves in RTR (perftest's bandwidth servers) replies
/// under it; `from`'s PSN does not enter it.
pub fn derive_reply(suite: Suite, secret: &[u8], from: &End, to: &End) -> DirectionKey {
    direction(suite, &prk(secret), Stream::Replies, from, to)
}

/// Why a received packet was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Too short to hold a trailer, or the tag did not verify: tampered, forged, sent
    /// in the clear, or under another key.
    Auth,
    /// Its sequence number was seen already, or is older than the window.
    Replayed,
}

/// Packets a direction sends under one key: the sequence number's bits above these name
/// its key epoch. 2^24 packets (64 GiB of 4 KiB packets) keeps each key well inside
/// AES-GCM's bounds for the data one key may protect (TLS 1.3 rekeys at 2^24.5 records).
const EPOCH_BITS: u32 = 24;

/// The sequence number's top bit: the packet is a reply sealed under the reply key
/// (`derive_reply`), by a QP that had no send key yet.
const REPLY: u64 = 1 << 63;

/// A secure QP's state: the keys, the next sequence number each sends under, the windows
/// it receives with. The engine keeps one per secure QP; a test's hostile peer, a fuzz
/// target or a decoder given the keys may keep their own.
pub struct Secured {
    suite: Suite,
    /// None until the QP has its send key (`add_send`).
    send: Option<Outbound>,
    /// What it replies under (ACKs, READ responses: packets in its peer's PSN space) while
    /// it has no send key: a QP left in RTR still answers.
    reply_send: Option<Outbound>,
    recv: Inbound,
    /// The peer's replies from before the peer had its send key.
    reply_recv: Option<Inbound>,
    epoch_bits: u32,
}

impl std::fmt::Debug for Secured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secured")
            .field("next", &self.send.as_ref().map(|o| o.next))
            .finish()
    }
}

/// The authenticated data: the BTH with its byte 4 masked, and the sequence number.
fn aad(bth: &[u8], seq: u64) -> [u8; BTH_LEN + SEQ_LEN] {
    let mut a = [0u8; BTH_LEN + SEQ_LEN];
    a[..BTH_LEN].copy_from_slice(&bth[..BTH_LEN]);
    a[4] = 0xff;
    a[BTH_LEN..].copy_from_slice(&seq.to_be_bytes());
    a
}

impl Secured {
    /// A QP's state with all its keys: it sends and receives.
    pub fn new(keys: &QpKeys) -> Secured {
        let mut s = Secured::receiving(keys.suite, &keys.recv, &keys.reply_send);
        s.add_send(&keys.send, &keys.reply_recv);
        s
    }

    /// A QP that can open what it receives, and reply, but has no send key yet (RTR): its
    /// receive key and its reply key (`derive_reply`, both from the peer's first PSN).
    pub fn receiving(suite: Suite, recv: &DirectionKey, reply: &DirectionKey) -> Secured {
        Secured {
            suite,
            send: None,
            reply_send: Some(Outbound::new(suite, reply)),
            recv: Inbound::new(suite, recv),
            reply_recv: None,
            epoch_bits: EPOCH_BITS,
        }
    }

    /// Its send key, and the key of the peer's replies from before the peer had its own
    /// (both from this QP's first PSN): from now on it seals what it sends with the first.
    pub fn add_send(&mut self, send: &DirectionKey, peer_reply: &DirectionKey) {
        self.send = Some(Outbound::new(self.suite, send));
        self.reply_recv = Some(Inbound::new(self.suite, peer_reply));
    }

    /// Short epochs, for tests of the change of keys (both ends must agree).
    #[doc(hidden)]
    pub fn with_epoch_bits(mut self, bits: u32) -> Secured {
        self.epoch_bits = bits.clamp(1, 62);
        self
    }

    /// Whether it has its send key.
    pub fn can_send(&self) -> bool {
        self.send.is_some()
    }

    /// Whether it may send anything: with its send key, or replies under its reply key.
    pub fn can_reply(&self) -> bool {
        self.send.is_some() || self.reply_send.is_some()
    }

    /// Seals the packet of `len` bytes (ICRC included, last) at the start of `buf`, in
    /// place; returns its new length (`len + TRAILER`), the ICRC field still last and, in
    /// a packet long enough, holding the transport bytes' part of the ICRC for the driver
    /// to finish (`oxrdma_wire::icrc_part`), as every packet the engine writes.
    /// Under its send key, or before it has one its reply key (`can_reply`: a QP without
    /// its send key sends nothing but replies).
    pub fn seal(&mut self, buf: &mut [u8], len: usize) -> usize {
        let body_end = len - ICRC_LEN;
        let (out, flag) = match (self.send.as_mut(), self.reply_send.as_mut()) {
            (Some(o), _) => (o, 0),
            (None, Some(o)) => (o, REPLY),
            (None, None) => unreachable!("sealing needs a key (can_reply)"),
        };
        let seq = out.take(self.epoch_bits) | flag;
        let a = aad(buf, seq);
        let tag = out
            .key
            .aead
            .seal(&out.key.raw.iv, seq, &a, &mut buf[BTH_LEN..body_end]);
        buf[body_end..body_end + SEQ_LEN].copy_from_slice(&seq.to_be_bytes());
        buf[body_end + SEQ_LEN..body_end + TRAILER].copy_from_slice(&tag);
        let end = len + TRAILER;
        crate::build::put_icrc_field(buf, end);
        end
    }

    /// Opens a received packet into `out` as it was before sealing (its ICRC field zero);
    /// returns that packet's length.
    pub fn open(&mut self, data: &[u8], out: &mut [u8]) -> Result<usize, OpenError> {
        if data.len() < BTH_LEN + TRAILER + ICRC_LEN || data.len() > out.len() + TRAILER {
            return Err(OpenError::Auth);
        }
        let body_end = data.len() - ICRC_LEN - TRAILER;
        let trailer = &data[body_end..body_end + TRAILER];
        let seq = u64::from_be_bytes(trailer[..SEQ_LEN].try_into().expect("8 bytes"));
        let inbound = if seq & REPLY == 0 {
            &mut self.recv
        } else {
            self.reply_recv.as_mut().ok_or(OpenError::Auth)?
        };
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&trailer[SEQ_LEN..]);
        out[..BTH_LEN].copy_from_slice(&data[..BTH_LEN]);
        let a = aad(data, seq);
        let sealed = &data[BTH_LEN..body_end];
        inbound.open(
            self.epoch_bits,
            seq,
            &a,
            sealed,
            &mut out[BTH_LEN..body_end],
            &tag,
        )?;
        out[body_end..body_end + ICRC_LEN].fill(0);
        Ok(body_end + ICRC_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> (End, End) {
        let a = End {
            gid: Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1)),
            qpn: 0x12_3456,
            psn: 0x00_0100,
        };
        let b = End {
            gid: Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2)),
            qpn: 0x65_4321,
            psn: 0xff_fff0,
        };
        (a, b)
    }

    /// A WRITE-like packet: BTH, 16 bytes of RETH, a payload, the ICRC field.
    fn packet(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x0a, 0, 0xff, 0xff, 0, 0x65, 0x43, 0x21, 0x80, 0, 1, 0];
        p.extend_from_slice(b"RETH-rkey-va-len");
        p.extend_from_slice(payload);
        p.extend_from_slice(&[0xee; 4]);
        p
    }

    /// `plain` sealed by `s`, as it goes on the wire.
    fn sealed_by(s: &mut Secured, plain: &[u8]) -> Vec<u8> {
        let mut buf = plain.to_vec();
        buf.resize(plain.len() + TRAILER, 0);
        let n = s.seal(&mut buf, plain.len());
        buf.truncate(n);
        buf
    }

    fn pair(suite: Suite) -> (Secured, Secured) {
        let (a, b) = ends();
        let ka = derive(suite, b"shared secret", &a, &b);
        let kb = derive(suite, b"shared secret", &b, &a);
        assert_eq!((&ka.send, &ka.recv), (&kb.recv, &kb.send));
        assert_ne!(ka.send, ka.recv, "a key per direction");
        (Secured::new(&ka), Secured::new(&kb))
    }

    #[test]
    fn a_sealed_packet_opens_to_what_was_sent_and_hides_it() {
        for suite in Suite::ALL {
            let (mut a, mut b) = pair(suite);
            let plain = packet(b"payload bytes!!!");
            let mut buf = plain.clone();
            buf.resize(plain.len() + TRAILER, 0);
            let n = a.seal(&mut buf, plain.len());
            assert_eq!(n, plain.len() + TRAILER);
            assert_eq!(buf[..12], plain[..12], "the BTH stays in the clear");
            let sealed = &buf[..n];
            for secret in [&b"RETH-rkey"[..], b"payload"] {
                assert!(
                    !sealed.windows(secret.len()).any(|w| w == secret),
                    "{suite:?}"
                );
            }
            let mut out = vec![0u8; 4200];
            let m = b.open(sealed, &mut out).unwrap();
            assert_eq!(out[..m - 4], plain[..plain.len() - 4], "{suite:?}");
            assert_eq!(b.open(sealed, &mut out), Err(OpenError::Replayed));
        }
    }

    #[test]
    fn tampered_forged_plain_and_misdirected_packets_do_not_open() {
        for suite in Suite::ALL {
            let (mut a, mut b) = pair(suite);
            let plain = packet(&[7; 64]);
            let mut buf = plain.clone();
            buf.resize(plain.len() + TRAILER, 0);
            let n = a.seal(&mut buf, plain.len());
            let mut out = vec![0u8; 4200];
            // Every byte but byte 4 of the BTH (masked, as the ICRC masks it) and the ICRC.
            for i in (0..n - 4).filter(|&i| i != 4) {
                let mut t = buf[..n].to_vec();
                t[i] ^= 0x01;
                assert_eq!(
                    b.open(&t, &mut out),
                    Err(OpenError::Auth),
                    "{suite:?} byte {i}"
                );
            }
            assert_eq!(
                b.open(&plain, &mut out),
                Err(OpenError::Auth),
                "in the clear"
            );
            assert_eq!(b.open(&buf[..20], &mut out), Err(OpenError::Auth), "short");
            // Its own packet back (the other direction's key), or another connection's key.
            let mut own = vec![0u8; 4200];
            assert_eq!(a.open(&buf[..n], &mut own), Err(OpenError::Auth));
            let (x, y) = ends();
            let other = derive(suite, b"another secret", &y, &x);
            assert_eq!(
                Secured::new(&other).open(&buf[..n], &mut own),
                Err(OpenError::Auth)
            );
            // Failures leave the window alone: the genuine packet still opens once.
            assert!(b.open(&buf[..n], &mut out).is_ok());
            // Another suite under the same secret: its keys differ too.
            for other in Suite::ALL.into_iter().filter(|&o| o != suite) {
                let (x, y) = ends();
                let k = derive(other, b"shared secret", &y, &x);
                assert_eq!(
                    Secured::new(&k).open(&buf[..n], &mut own),
                    Err(OpenError::Auth),
                    "{suite:?} opened by {other:?}"
                );
            }
        }
    }

    #[test]
    fn the_same_packet_sealed_twice_differs_and_each_opens() {
        for suite in Suite::ALL {
            let (mut a, mut b) = pair(suite);
            let plain = packet(&[3; 256]);
            let sealed: Vec<Vec<u8>> = (0..2).map(|_| sealed_by(&mut a, &plain)).collect();
            assert_ne!(
                sealed[0][12..],
                sealed[1][12..],
                "{suite:?}: a nonce per packet"
            );
            let mut out = vec![0u8; 4200];
            for p in &sealed {
                let m = b.open(p, &mut out).unwrap();
                assert_eq!(out[..m - 4], plain[..plain.len() - 4], "{suite:?}");
            }
        }
    }

    #[test]
    fn suites_are_named_as_parsed() {
        for suite in Suite::ALL {
            assert_eq!(Suite::parse(suite.name()), Some(suite));
        }
        assert_eq!(Suite::parse("aes-128-gcm"), None);
        assert_eq!(Suite::default(), Suite::Aegis128X2);
    }

    #[test]
    fn each_direction_is_derived_alone_from_what_its_receiver_knows_at_rtr() {
        let (a, b) = ends();
        let k = derive(Suite::Aes256Gcm, b"psk", &a, &b);
        // The receiver's own first PSN does not enter its receive key.
        let (a_later, b_later) = (End { psn: 0x41, ..a }, End { psn: 0x42, ..b });
        assert_eq!(
            derive_direction(Suite::Aes256Gcm, b"psk", &b, &a_later),
            k.recv
        );
        assert_eq!(
            derive_direction(Suite::Aes256Gcm, b"psk", &a, &b_later),
            k.send
        );
        let other = End { psn: 0x43, ..a };
        assert_ne!(
            derive_direction(Suite::Aes256Gcm, b"psk", &other, &b),
            k.send
        );
        // The reply key of b's answers to a: under a's first PSN, which b knows at RTR;
        // b's own does not enter it.
        let reply = derive_reply(Suite::Aes256Gcm, b"psk", &b_later, &a);
        assert_eq!(reply, k.reply_recv);
        assert_ne!(derive_reply(Suite::Aes256Gcm, b"psk", &b, &a_later), reply);
        assert_ne!(reply, derive_direction(Suite::Aes256Gcm, b"psk", &b, &a));
        // A QP with its receive key opens, and replies; it seals anything once it has its
        // send key.
        let mut rx = Secured::receiving(Suite::Aes256Gcm, &k.send, &reply);
        assert!(!rx.can_send() && rx.can_reply());
        let mut tx = Secured::new(&k);
        let mut out = vec![0u8; 4200];
        let sealed = sealed_by(&mut tx, &packet(&[3; 32]));
        assert!(rx.open(&sealed, &mut out).is_ok());
        rx.add_send(&k.recv, &k.reply_send);
        assert!(rx.can_send());
    }

    /// A QP a program leaves in RTR (perftest's bandwidth servers) has no send key and
    /// still answers: under its reply key, its own stream and window, which its peer opens
    /// and nobody else does.
    #[test]
    fn a_qp_in_rtr_replies_under_its_reply_key() {
        for suite in Suite::ALL {
            let (a, b) = ends();
            let ka = derive(suite, b"psk", &a, &b);
            let kb = derive(suite, b"psk", &b, &a);
            assert_eq!(
                (&ka.reply_send, &ka.reply_recv),
                (&kb.reply_recv, &kb.reply_send)
            );
            let mut server = Secured::receiving(suite, &kb.recv, &kb.reply_send);
            let mut client = Secured::new(&ka);
            let mut out = vec![0u8; 4200];
            let request = sealed_by(&mut client, &packet(&[1; 64]));
            assert!(server.open(&request, &mut out).is_ok(), "{suite:?}");
            let ack = packet(&[2; 8]);
            let replies: Vec<Vec<u8>> = (0..3).map(|_| sealed_by(&mut server, &ack)).collect();
            // Sequence numbers of their own, the reply bit set: the window takes each once,
            // alongside the main stream's.
            for r in &replies {
                let m = client.open(r, &mut out).unwrap();
                assert_eq!(out[..m - 4], ack[..ack.len() - 4], "{suite:?}");
            }
            assert_eq!(client.open(&replies[1], &mut out), Err(OpenError::Replayed));
            let more = sealed_by(&mut client, &packet(&[1; 64]));
            assert!(
                server.open(&more, &mut out).is_ok(),
                "{suite:?}: the main window"
            );
            // One who has no reply key (the server itself, a QP of another connection)
            // opens none of them.
            let mut stranger = Secured::receiving(suite, &kb.reply_send, &kb.reply_send);
            assert_eq!(stranger.open(&replies[2], &mut out), Err(OpenError::Auth));
            // Once it has its send key the server seals under it, as every QP does.
            server.add_send(&kb.send, &kb.reply_recv);
            let reply = sealed_by(&mut server, &ack);
            let seq = &reply[reply.len() - 4 - TRAILER..][..8];
            assert_eq!(seq[0] & 0x80, 0, "{suite:?}: the main stream");
            assert!(client.open(&reply, &mut out).is_ok(), "{suite:?}");
        }
    }

    #[test]
    fn keys_move_on_each_epoch_and_the_old_ones_are_dropped() {
        let (a, b) = ends();
        let ka = derive(Suite::Aes256Gcm, b"s", &a, &b);
        let kb = derive(Suite::Aes256Gcm, b"s", &b, &a);
        // Four packets an epoch.
        let mut tx = Secured::new(&ka).with_epoch_bits(2);
        let mut rx = Secured::new(&kb).with_epoch_bits(2);
        let sealed: Vec<Vec<u8>> = (0..16u8)
            .map(|i| sealed_by(&mut tx, &packet(&[i; 8])))
            .collect();
        let mut out = vec![0u8; 4200];
        // A receiver that never changes keys opens epoch 0 and nothing after: the keys did
        // change.
        let mut fixed = Secured::new(&kb);
        assert!(fixed.open(&sealed[3], &mut out).is_ok());
        assert_eq!(fixed.open(&sealed[4], &mut out), Err(OpenError::Auth));
        // Across a change, in either order.
        for i in [0, 1, 5, 2, 4, 3, 6] {
            let m = rx.open(&sealed[i], &mut out).unwrap();
            assert_eq!(out[12 + 16..m - 4], [i as u8; 8], "packet {i}");
        }
        // A forged packet that claims the next epoch moves nothing.
        let mut forged = sealed[8].clone();
        forged[20] ^= 1;
        assert_eq!(rx.open(&forged, &mut out), Err(OpenError::Auth));
        assert!(
            rx.open(&sealed[7], &mut out).is_ok(),
            "epoch 1 still current"
        );
        // Epoch 2 begins: epoch 1's key stays for late packets, epoch 0's is gone.
        for (i, p) in sealed.iter().enumerate().take(12).skip(8) {
            assert!(rx.open(p, &mut out).is_ok(), "packet {i}");
        }
        let mut late = Secured::new(&kb).with_epoch_bits(2);
        assert!(
            late.open(&sealed[1], &mut out).is_ok(),
            "what rx opened once"
        );
        assert_eq!(
            rx.open(&sealed[1], &mut out),
            Err(OpenError::Replayed),
            "seen, and its epoch's key dropped"
        );
        assert!(rx.open(&sealed[12], &mut out).is_ok());
        // Two epochs back is beyond the keys kept, even were it new to the window.
        let mut r2 = Secured::new(&kb).with_epoch_bits(2);
        for i in [4, 8] {
            assert!(r2.open(&sealed[i], &mut out).is_ok(), "packet {i}");
        }
        assert_eq!(r2.open(&sealed[0], &mut out), Err(OpenError::Auth));
        assert!(r2.open(&sealed[5], &mut out).is_ok(), "the previous epoch");
    }

    #[test]
    fn packets_open_in_any_order_within_the_window() {
        let (mut a, mut b) = pair(Suite::ChaCha20Poly1305);
        let sealed: Vec<Vec<u8>> = (0..8u8)
            .map(|i| {
                let plain = packet(&[i; 8]);
                let mut buf = plain.clone();
                buf.resize(plain.len() + TRAILER, 0);
                let n = a.seal(&mut buf, plain.len());
                buf.truncate(n);
                buf
            })
            .collect();
        let mut out = vec![0u8; 4200];
        for i in [3, 0, 7, 1, 2, 6, 5, 4] {
            let m = b.open(&sealed[i], &mut out).unwrap();
            assert_eq!(out[12 + 16..m - 4], [i as u8; 8]);
        }
    }
}
