//! What one side sends the other to connect (out of band: a TCP socket, a file, a job
//! launcher): its QP's [`Endpoint`], with the [`RemoteBuf`]s the peer may WRITE, READ or
//! target with atomics. Both have a stable byte form ([`Endpoint::to_bytes`]) and, with
//! the `serde` feature, serde's.

use crate::error::{Error, Result};
use crate::secure::PublicKey;
use oxrdma_core::Gid;
use std::ops::{Bound, RangeBounds};

/// Memory a peer may access: its address as the peer names it, its rkey, its length
/// ([`MemoryRegion::remote`](crate::MemoryRegion::remote)). A work request aimed at a
/// `RemoteBuf` cannot miss its rkey, and a slice of one cannot reach past its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RemoteBuf {
    addr: u64,
    rkey: u32,
    len: u64,
}

impl RemoteBuf {
    /// A peer's memory as it described it (for a peer that is not oxrdma: `len` bytes at
    /// `addr` under `rkey`). `None` if the range wraps around the address space.
    pub fn new(addr: u64, rkey: u32, len: u64) -> Option<RemoteBuf> {
        addr.checked_add(len)?;
        Some(RemoteBuf { addr, rkey, len })
    }

    /// The address of its first byte, as the peer names it.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The key that grants access to it.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `range` of it (offsets from its start), or an error if the range reaches
    /// past its end.
    pub fn slice(&self, range: impl RangeBounds<u64>) -> Result<RemoteBuf> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(Error::Verbs(oxrdma_core::VerbsError::InvalidArgument(
                "a remote slice reaches past the buffer's end",
            )));
        }
        Ok(RemoteBuf {
            addr: self.addr + start,
            rkey: self.rkey,
            len: end - start,
        })
    }
}

/// What the other side needs to connect to a QP, and the memory it may access.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Endpoint {
    /// The GID the QP sends from (its device's address).
    #[cfg_attr(feature = "serde", serde(with = "gid_text"))]
    pub gid: Gid,
    /// The QP's number.
    pub qpn: u32,
    /// The first PSN the QP sends (drawn when it was made; `QueuePair::set_psn`).
    pub psn: u32,
    /// The X25519 public key of a QP that offers to be secure
    /// ([`QueuePair::secure_endpoint`](crate::QueuePair::secure_endpoint)); None from a
    /// peer that does not (rxe, or a plain oxrdma QP).
    pub key: Option<PublicKey>,
    /// Memory the peer may access, as many buffers as the application offers.
    pub buffers: Vec<RemoteBuf>,
}

const MAGIC: &[u8; 4] = b"OXEP";
const VERSION: u8 = 1;
const HAS_KEY: u8 = 1;
/// Magic, version, flags, GID, QPN, PSN, the number of buffers.
const FIXED: usize = 4 + 1 + 1 + 16 + 4 + 4 + 2;
const BUF: usize = 8 + 4 + 8;

impl Endpoint {
    /// The same endpoint offering `buf` too.
    #[must_use]
    pub fn with_buffer(mut self, buf: RemoteBuf) -> Endpoint {
        self.buffers.push(buf);
        self
    }

    /// Its stable byte form: `OXEP`, version 1, flags (bit 0: a key follows), the GID (16
    /// bytes), QPN and PSN (4 each), the key (32, if any), the number of buffers (2), and
    /// each buffer's address (8), rkey (4) and length (8); big-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FIXED + 32 + BUF * self.buffers.len());
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.push(if self.key.is_some() { HAS_KEY } else { 0 });
        b.extend_from_slice(&self.gid.0);
        b.extend_from_slice(&self.qpn.to_be_bytes());
        b.extend_from_slice(&self.psn.to_be_bytes());
        if let Some(k) = &self.key {
            b.extend_from_slice(k);
        }
        let n = u16::try_from(self.buffers.len()).unwrap_or(u16::MAX);
        b.extend_from_slice(&n.to_be_bytes());
        for r in self.buffers.iter().take(usize::from(n)) {
            b.extend_from_slice(&r.addr.to_be_bytes());
            b.extend_from_slice(&r.rkey.to_be_bytes());
            b.extend_from_slice(&r.len.to_be_bytes());
        }
        b
    }

    /// An endpoint from its byte form ([`Self::to_bytes`]), every field checked: the
    /// magic and version, 24-bit QPN and PSN, buffers that do not wrap, no byte missing
    /// or left over.
    pub fn from_bytes(b: &[u8]) -> Result<Endpoint> {
        let bad = |why: &str| Error::BadPeer(format!("endpoint bytes: {why}"));
        let mut r = Reader(b);
        if r.take(4).ok_or_else(|| bad("too short"))? != MAGIC {
            return Err(bad("not an oxrdma endpoint"));
        }
        let version = r.u8().ok_or_else(|| bad("too short"))?;
        if version != VERSION {
            return Err(bad(&format!("version {version}, not {VERSION}")));
        }
        let flags = r.u8().ok_or_else(|| bad("too short"))?;
        if flags & !HAS_KEY != 0 {
            return Err(bad(&format!("unknown flags {flags:#x}")));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(r.take(16).ok_or_else(|| bad("too short"))?);
        let qpn = r.u32().ok_or_else(|| bad("too short"))?;
        let psn = r.u32().ok_or_else(|| bad("too short"))?;
        if qpn >= 1 << 24 || psn >= 1 << 24 {
            return Err(bad("a QPN or PSN of more than 24 bits"));
        }
        let key = if flags & HAS_KEY != 0 {
            let mut k = [0u8; 32];
            k.copy_from_slice(r.take(32).ok_or_else(|| bad("too short"))?);
            Some(k)
        } else {
            None
        };
        let n = r.u16().ok_or_else(|| bad("too short"))?;
        let mut buffers = Vec::with_capacity(usize::from(n).min(b.len() / BUF));
        for _ in 0..n {
            let (addr, rkey, len) = (r.u64(), r.u32(), r.u64());
            let (Some(addr), Some(rkey), Some(len)) = (addr, rkey, len) else {
                return Err(bad("too short"));
            };
            buffers.push(RemoteBuf::new(addr, rkey, len).ok_or_else(|| bad("a buffer wraps"))?);
        }
        if !r.0.is_empty() {
            return Err(bad("bytes left over"));
        }
        Ok(Endpoint {
            gid: Gid(gid),
            qpn,
            psn,
            key,
            buffers,
        })
    }
}

/// A GID in serde as its IPv6 text (`::ffff:10.0.0.1`).
#[cfg(feature = "serde")]
mod gid_text {
    use oxrdma_core::Gid;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use std::net::Ipv6Addr;

    pub fn serialize<S: Serializer>(g: &Gid, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&Ipv6Addr::from(g.0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Gid, D::Error> {
        let text = String::deserialize(d)?;
        let a: Ipv6Addr = text.parse().map_err(D::Error::custom)?;
        Ok(Gid(a.octets()))
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (h, t) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(key: bool, n: u64) -> Endpoint {
        Endpoint {
            gid: Gid::from(std::net::Ipv4Addr::new(10, 1, 2, 3)),
            qpn: 0xab_cdef,
            psn: 0x12_3456,
            key: key.then_some([7; 32]),
            buffers: (0..n)
                .map(|i| RemoteBuf::new(0x1000 * i, i as u32 + 9, 4096 + i).unwrap())
                .collect(),
        }
    }

    #[test]
    fn the_byte_form_round_trips_and_is_stable() {
        for (key, n) in [(false, 0), (true, 1), (false, 3), (true, 40)] {
            let e = sample(key, n);
            let b = e.to_bytes();
            assert_eq!(Endpoint::from_bytes(&b).unwrap(), e);
        }
        // The form is fixed: this is what version 1 looks like.
        let b = sample(false, 1).to_bytes();
        assert_eq!(&b[..6], b"OXEP\x01\x00");
        assert_eq!(&b[22..30], &[0, 0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56]);
        assert_eq!(b.len(), FIXED + BUF);
    }

    #[test]
    fn bad_bytes_are_refused_with_a_reason() {
        let good = sample(true, 2).to_bytes();
        for cut in 0..good.len() {
            assert!(Endpoint::from_bytes(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = good.clone();
        extra.push(0);
        let e = Endpoint::from_bytes(&extra).unwrap_err();
        assert!(e.to_string().contains("left over"), "{e}");
        let mut v = good.clone();
        v[4] = 2;
        assert!(Endpoint::from_bytes(&v)
            .unwrap_err()
            .to_string()
            .contains("version 2"));
        let mut q = good.clone();
        q[22] = 1; // QPN's top byte
        assert!(Endpoint::from_bytes(&q).is_err());
        let mut m = good.clone();
        m[0] = b'X';
        assert!(Endpoint::from_bytes(&m).is_err());
        let mut wrap = sample(false, 1).to_bytes();
        let at = FIXED;
        wrap[at..at + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(Endpoint::from_bytes(&wrap)
            .unwrap_err()
            .to_string()
            .contains("wraps"));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_carries_every_field() {
        let e = sample(true, 2);
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.contains("\"gid\":\"::ffff:10.1.2.3\""), "{json}");
        assert_eq!(serde_json::from_str::<Endpoint>(&json).unwrap(), e);
        let bad = json.replace("::ffff:10.1.2.3", "not an address");
        assert!(serde_json::from_str::<Endpoint>(&bad).is_err());
    }

    #[test]
    fn a_slice_stays_inside_its_buffer() {
        let r = RemoteBuf::new(0x1000, 5, 100).unwrap();
        let s = r.slice(10..30).unwrap();
        assert_eq!((s.addr(), s.rkey(), s.len()), (0x100a, 5, 20));
        assert_eq!(r.slice(..).unwrap(), r);
        assert_eq!(r.slice(90..).unwrap().len(), 10);
        assert_eq!(r.slice(..=99).unwrap().len(), 100);
        assert!(r.slice(..=100).is_err());
        assert!(r.slice(50..101).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = r.slice(60..50);
        assert!(backwards.is_err());
        assert!(s.slice(0..21).is_err(), "a slice of a slice");
        assert!(RemoteBuf::new(u64::MAX, 1, 2).is_none());
    }
}
