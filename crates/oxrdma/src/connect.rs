//! Exchanging endpoints and memory keys over TCP, so two programs connect in a few lines.
//!
//! Each side writes one line, `oxrdma1 <gid> <qpn> <psn> <addr> <rkey> <len>` (numbers in
//! hex), and `key=<64 hex digits>` after them when its QP offers to be secure (its X25519
//! public key), and reads the other's.

use crate::error::{Error, Result};
use crate::qp::Endpoint;
use oxrdma_core::Gid;
use std::io::{Read, Write};
use std::net::Ipv6Addr;

/// An endpoint plus the one memory region the peer may access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its QP.
    pub endpoint: Endpoint,
    /// The address of the region the peer may access.
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its length.
    pub len: u64,
}

fn line(p: &PeerInfo) -> String {
    let e = &p.endpoint;
    let key = e.key.map_or(String::new(), |k| {
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        format!(" key={hex}")
    });
    format!(
        "oxrdma1 {} {:x} {:x} {:x} {:x} {:x}{key}\n",
        Ipv6Addr::from(e.gid.0),
        e.qpn,
        e.psn,
        p.addr,
        p.rkey,
        p.len
    )
}

/// `key=<64 hex digits>`.
fn parse_key(f: &str) -> Option<[u8; 32]> {
    crate::secure::parse_key(f.strip_prefix("key=")?)
}

fn parse(l: &str) -> Result<PeerInfo> {
    let bad = || Error::BadPeer(l.trim().to_string());
    let f: Vec<&str> = l.split_whitespace().collect();
    if !(7..=8).contains(&f.len()) || f[0] != "oxrdma1" {
        return Err(bad());
    }
    let key = match f.get(7) {
        Some(k) => Some(parse_key(k).ok_or_else(bad)?),
        None => None,
    };
    let gid: Ipv6Addr = f[1].parse().map_err(|_| bad())?;
    let h = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
    let (qpn, psn) = (h(f[2])?, h(f[3])?);
    if qpn >= 1 << 24 || psn >= 1 << 24 {
        return Err(bad());
    }
    Ok(PeerInfo {
        endpoint: Endpoint {
            gid: Gid(gid.octets()),
            qpn: qpn as u32,
            psn: psn as u32,
            key,
            buffers: Vec::new(),
        },
        addr: h(f[4])?,
        rkey: u32::try_from(h(f[5])?).map_err(|_| bad())?,
        len: h(f[6])?,
    })
}

/// Sends `local` and returns what the peer sent (over a `TcpStream`, usually).
pub fn exchange<S: Read + Write>(stream: &mut S, local: &PeerInfo) -> Result<PeerInfo> {
    stream.write_all(line(local).as_bytes())?;
    // Byte by byte: whatever the peer sends after its line is not ours to consume.
    let mut l = Vec::new();
    let mut b = [0u8; 1];
    while b[0] != b'\n' {
        stream.read_exact(&mut b)?;
        l.push(b[0]);
        if l.len() > 256 {
            return Err(Error::BadPeer("line too long".into()));
        }
    }
    parse(&String::from_utf8_lossy(&l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_round_trip_and_bad_input() {
        let p = PeerInfo {
            endpoint: Endpoint {
                gid: Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 2)),
                qpn: 0xabcdef,
                psn: 0x123,
                key: None,
                buffers: Vec::new(),
            },
            addr: 0x7f00_1234_0000,
            rkey: 0xdead_beef,
            len: 4096,
        };
        assert_eq!(parse(&line(&p)).unwrap(), p);
        let mut secure = p;
        secure.endpoint.key = Some(std::array::from_fn(|i| i as u8 * 7));
        let l = line(&secure);
        assert!(l.len() <= 256, "{l}");
        assert_eq!(parse(&l).unwrap(), secure);
        assert!(parse(&l.replace("key=00", "key=0")).is_err(), "a short key");
        assert!(parse(&l.replace("key=", "kee=")).is_err());
        assert!(parse("oxrdma1 ::1 1000000 0 0 0 0").is_err());
        assert!(parse("hello").is_err());
        assert!(parse("oxrdma1 ::1 1 2 3 100000000 5").is_err());
    }
}
