//! One stream of sealed packets each way: what a sender keeps (its key in the current
//! epoch, the next sequence number) and what a receiver keeps (the keys of the epochs a
//! packet may still come in, the replay window). A secure QP has a stream each way for
//! everything, and one for replies sent before the QP had its send key.

use super::cipher::Cipher;
use super::replay::Replay;
use super::{hkdf, DirectionKey, Len, OpenError, Suite};

/// A stream's key in one epoch. The next epoch's key is derived from this one's (a
/// ratchet): once both ends have moved on and dropped it, a key taken later does not
/// open what went before.
pub(super) struct EpochKey {
    pub(super) epoch: u64,
    pub(super) raw: DirectionKey,
    pub(super) aead: Cipher,
    /// The suite, for the next epoch's cipher.
    suite: Suite,
}

impl EpochKey {
    fn first(suite: Suite, k: &DirectionKey) -> EpochKey {
        EpochKey {
            epoch: 0,
            raw: k.clone(),
            aead: Cipher::new(suite, &k.key),
            suite,
        }
    }

    fn next(&self) -> EpochKey {
        let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &self.raw.key);
        let mut out = [0u8; 44];
        prk.expand(&[b"oxrdma next epoch".as_slice()], Len(44))
            .and_then(|okm| okm.fill(&mut out))
            .expect("44 bytes are within HKDF-SHA256's reach");
        let mut raw = DirectionKey {
            key: [0; 32],
            iv: [0; 12],
        };
        raw.key.copy_from_slice(&out[..32]);
        raw.iv.copy_from_slice(&out[32..]);
        EpochKey {
            epoch: self.epoch + 1,
            aead: Cipher::new(self.suite, &raw.key),
            raw,
            suite: self.suite,
        }
    }
}

/// The sending end of a stream.
pub(super) struct Outbound {
    pub(super) key: EpochKey,
    pub(super) next: u64,
}

impl Outbound {
    pub(super) fn new(suite: Suite, k: &DirectionKey) -> Outbound {
        Outbound {
            key: EpochKey::first(suite, k),
            next: 0,
        }
    }

    /// The next packet's sequence number, the key moved on to its epoch.
    pub(super) fn take(&mut self, epoch_bits: u32) -> u64 {
        let seq = self.next;
        self.next += 1;
        if seq >> epoch_bits != self.key.epoch {
            self.key = self.key.next();
        }
        seq
    }
}

/// The receiving end of a stream.
pub(super) struct Inbound {
    /// The key of the newest epoch a packet was opened in (the first at first).
    recv: EpochKey,
    /// The epoch before it, for packets of that epoch still on their way.
    prev: Option<EpochKey>,
    /// The next epoch's, derived when a packet first claims it.
    ahead: Option<EpochKey>,
    window: Replay,
}

impl Inbound {
    pub(super) fn new(suite: Suite, k: &DirectionKey) -> Inbound {
        Inbound {
            recv: EpochKey::first(suite, k),
            prev: None,
            ahead: None,
            window: Replay::default(),
        }
    }

    /// Opens `sealed` (sequence number `seq`, its stream flag included) into `out` if it
    /// is fresh and verifies under its epoch's key; the window and the epochs move on.
    pub(super) fn open(
        &mut self,
        epoch_bits: u32,
        seq: u64,
        aad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
        tag: &[u8; 16],
    ) -> Result<(), OpenError> {
        let n = seq & !super::REPLY;
        if !self.window.fresh(n) {
            return Err(OpenError::Replayed);
        }
        let epoch = n >> epoch_bits;
        let k = if epoch == self.recv.epoch {
            &self.recv
        } else if epoch == self.recv.epoch + 1 {
            let recv = &self.recv;
            self.ahead.get_or_insert_with(|| recv.next())
        } else {
            match &self.prev {
                Some(p) if p.epoch == epoch => p,
                _ => return Err(OpenError::Auth),
            }
        };
        if !k.aead.open(&k.raw.iv, seq, aad, sealed, out, tag) {
            return Err(OpenError::Auth);
        }
        self.window.accept(n);
        // The first packet of the next epoch moves the keys on; the oldest is dropped.
        if epoch == self.recv.epoch + 1 {
            if let Some(next) = self.ahead.take() {
                self.prev = Some(std::mem::replace(&mut self.recv, next));
            }
        }
        Ok(())
    }
}
