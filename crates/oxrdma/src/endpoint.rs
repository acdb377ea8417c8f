//! What one side sends the other to connect (out of band: a TCP socket, a file, a job
//! launcher): its QP's [`Endpoint`], with the [`RemoteBuf`]s the peer may WRITE, READ or
//! target with atomics. Both have a stable byte form ([`Endpoint::to_bytes`]) and, with
//! the `serde` feature, serde's.

use crate::error::{Error, Result};
use crate::secure::PublicKey;
use oxrdma_core::{Gid, RemoteBuf};

/// What the other side needs to connect to a QP, and the memory it may access.
///
/// ```
/// use oxrdma::{Access, Context, Endpoint, QpCap, QpType};
/// # fn main() -> oxrdma::Result<()> {
/// let ctx = Context::open("127.0.1.1".parse().unwrap())?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
/// let cq = ctx.create_cq(8)?;
/// let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
/// // What goes to the peer (any way: TCP, a file, a job launcher) is bytes.
/// let bytes = qp.endpoint().with_buffer(mr.remote()).to_bytes();
/// let back = Endpoint::from_bytes(&bytes)?;
/// assert_eq!((back.qpn, back.psn), (qp.qpn(), qp.psn()));
/// assert_eq!(back.buffers[0].rkey(), mr.rkey());
/// # Ok(())
/// # }
/// ```
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
            b.extend_from_slice(&r.addr().to_be_bytes());
            b.extend_from_slice(&r.rkey().to_be_bytes());
            b.extend_from_slice(&r.len().to_be_bytes());
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

impl Endpoint {
    /// Sends this endpoint over `stream` (a `TcpStream`, usually) and returns the peer's:
    /// each side writes its byte form after a 4-byte big-endian length, then reads the
    /// other's (at most 1 MiB, and nothing past it).
    pub fn exchange<S: std::io::Read + std::io::Write>(&self, stream: &mut S) -> Result<Endpoint> {
        let mine = self.to_bytes();
        let n =
            u32::try_from(mine.len()).map_err(|_| Error::BadPeer("endpoint too large".into()))?;
        stream.write_all(&n.to_be_bytes())?;
        stream.write_all(&mine)?;
        stream.flush()?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > 1 << 20 {
            return Err(Error::BadPeer(format!("a {len}-byte endpoint")));
        }
        let mut theirs = vec![0u8; len];
        stream.read_exact(&mut theirs)?;
        Endpoint::from_bytes(&theirs)
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
}
