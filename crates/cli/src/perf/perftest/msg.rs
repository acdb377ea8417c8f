//! perftest's side-channel records (tests/interop/PERFTEST-OOB.md §2): fixed-size byte
//! strings, each written in one piece and read whole.

use anyhow::{bail, Context as _};
use oxrdma::Mtu;

/// The version we claim: perftest 4.5+0.17 sends "6.06" and refuses peers below 5.70.
pub const VERSION: &str = "6.06";
pub const VERSION_LEN: usize = 16;
/// `KEY_MSG_SIZE_GID`: 107 characters and a NUL.
pub const KEYS_LEN: usize = 108;
pub const DONE: &[u8; 5] = b"done\0";

/// Our version string, NUL-padded like perftest's `char version[16]`.
pub fn version() -> [u8; VERSION_LEN] {
    let mut v = [0u8; VERSION_LEN];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    v
}

/// The peer's version as (major, minor); too old or not a version is an error.
pub fn parse_version(b: &[u8]) -> anyhow::Result<(u32, u32)> {
    let text = c_str(b)?;
    let v = text
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .with_context(|| format!("the peer sent {text:?} where perftest sends its version"))?;
    // perftest compares versions as "major.minor" numbers; below 5.70 the exchange differs.
    if v < (5, 70) {
        bail!("the peer runs perftest {text}; only 5.70 and later are supported");
    }
    Ok(v)
}

/// A big-endian 32-bit integer (`htonl`): the cycle buffer and cache line sizes.
pub fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Parses a big-endian size that must be a power of two in `1..=max` (a cycle buffer or
/// a cache line; anything else would make the address stepping nonsense).
pub fn parse_pow2(b: &[u8], what: &str, max: u32) -> anyhow::Result<u32> {
    let v = u32::from_be_bytes(b.try_into().context("4-byte field")?);
    if !v.is_power_of_two() || v > max {
        bail!("the peer sent {what} {v}; expected a power of two up to {max}");
    }
    Ok(v)
}

/// The path MTU as perftest sends it: the `enum ibv_mtu` digit and a NUL.
pub fn mtu_msg(m: Mtu) -> [u8; 2] {
    [b'0' + mtu_enum(m), 0]
}

fn mtu_enum(m: Mtu) -> u8 {
    match m {
        Mtu::Mtu256 => 1,
        Mtu::Mtu512 => 2,
        Mtu::Mtu1024 => 3,
        Mtu::Mtu2048 => 4,
        Mtu::Mtu4096 => 5,
    }
}

pub fn parse_mtu(b: &[u8]) -> anyhow::Result<Mtu> {
    Ok(match b {
        [b'1', 0] => Mtu::Mtu256,
        [b'2', 0] => Mtu::Mtu512,
        [b'3', 0] => Mtu::Mtu1024,
        [b'4', 0] => Mtu::Mtu2048,
        [b'5', 0] => Mtu::Mtu4096,
        _ => bail!("the peer sent {b:02x?} where perftest sends its MTU (\"1\"..\"5\" + NUL)"),
    })
}

/// The smaller of two MTUs.
pub fn min_mtu(a: Mtu, b: Mtu) -> Mtu {
    if mtu_enum(a) <= mtu_enum(b) {
        a
    } else {
        b
    }
}

/// One side's connection data: the 108-byte KEYS message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    pub lid: u16,
    /// Outstanding RDMA READ/atomic depth this side accepts (its max_dest_rd_atomic).
    pub out_reads: u16,
    pub qpn: u32,
    /// The first PSN this side sends with.
    pub psn: u32,
    pub rkey: u32,
    /// Where the peer must aim its RDMA operations.
    pub vaddr: u64,
    pub gid: [u8; 16],
    pub srqn: u32,
}

impl Keys {
    pub fn encode(&self) -> [u8; KEYS_LEN] {
        use std::fmt::Write as _;
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            let _ = write!(s, "{b:02x}:");
        }
        let _ = write!(s, "{:08x}:", self.srqn);
        let mut m = [0u8; KEYS_LEN];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    /// Parses a KEYS message: 23 colon-terminated hex fields before the NUL. Widths are
    /// not enforced (perftest parses with strtol), ranges are.
    pub fn parse(b: &[u8]) -> anyhow::Result<Keys> {
        let text = c_str(b)?;
        let bad =
            |why: &str| anyhow::anyhow!("malformed KEYS message from the peer ({why}): {text:?}");
        let body = text
            .strip_suffix(':')
            .ok_or_else(|| bad("no trailing ':'"))?;
        let f: Vec<&str> = body.split(':').collect();
        if f.len() != 23 {
            return Err(bad(&format!("{} fields instead of 23", f.len())));
        }
        let hex = |i: usize, max: u64| -> anyhow::Result<u64> {
            let s = f[i];
            let v = (1..=16)
                .contains(&s.len())
                .then(|| u64::from_str_radix(s, 16).ok())
                .flatten()
                .ok_or_else(|| bad(&format!("field {} is not hex", i + 1)))?;
            if v > max {
                return Err(bad(&format!("field {} is out of range", i + 1)));
            }
            Ok(v)
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = hex(6 + k, 0xff)? as u8;
        }
        Ok(Keys {
            lid: hex(0, 0xffff)? as u16,
            out_reads: hex(1, 0xffff)? as u16,
            qpn: hex(2, 0xff_ffff)? as u32,
            psn: hex(3, 0xff_ffff)? as u32,
            rkey: hex(4, 0xffff_ffff)? as u32,
            vaddr: hex(5, u64::MAX)?,
            gid,
            srqn: hex(22, 0xffff_ffff)? as u32,
        })
    }
}

/// The text before the first NUL; a message without one, or not ASCII, is an error.
fn c_str(b: &[u8]) -> anyhow::Result<&str> {
    let end = b
        .iter()
        .position(|&c| c == 0)
        .with_context(|| format!("the peer sent {} bytes without a terminating NUL", b.len()))?;
    let s = std::str::from_utf8(&b[..end]).ok().filter(|s| s.is_ascii());
    s.with_context(|| format!("the peer sent non-ASCII text {:02x?}", &b[..end]))
}

/// The five REPORT fields a bw client sends after the test (`xchg_bw_reports`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    /// MB/s, or Gb/s with --report_gbits.
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Millions of messages per second.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five 8-byte big-endian fields in wire order.
    pub fn fields(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_be_bytes(),
            self.bw_avg.to_be_bytes(),
            self.msg_rate.to_be_bytes(),
        ]
    }

    pub fn from_fields(f: &[[u8; 8]; 5]) -> BwReport {
        BwReport {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: f64::from_be_bytes(f[2]),
            bw_avg: f64::from_be_bytes(f[3]),
            msg_rate: f64::from_be_bytes(f[4]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's KEYS of `ib_write_bw -s 4096` in vectors/rxe-pcap/rc_write_bw.pcap.
    const CAPTURED: &str = "0000:0001:000015:77a9b8:00000645:000055cd78dde000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:";

    fn captured() -> [u8; KEYS_LEN] {
        let mut m = [0u8; KEYS_LEN];
        m[..CAPTURED.len()].copy_from_slice(CAPTURED.as_bytes());
        m
    }

    #[test]
    fn captured_keys_parse_and_reencode_byte_for_byte() {
        assert_eq!(CAPTURED.len(), KEYS_LEN - 1);
        let k = Keys::parse(&captured()).unwrap();
        assert_eq!(k.out_reads, 1);
        assert_eq!(k.qpn, 0x15);
        assert_eq!(k.psn, 0x77a9b8);
        assert_eq!(k.rkey, 0x645);
        assert_eq!(k.vaddr, 0x0000_55cd_78dd_e000);
        assert_eq!(k.gid[10..], [0xff, 0xff, 10, 77, 0, 2]);
        assert_eq!(k.encode(), captured());
    }

    #[test]
    fn keys_round_trip_at_the_field_limits() {
        let k = Keys {
            lid: 0xffff,
            out_reads: 128,
            qpn: 0xff_ffff,
            psn: 0,
            rkey: 0xdead_beef,
            vaddr: u64::MAX,
            gid: [0xab; 16],
            srqn: 7,
        };
        assert_eq!(Keys::parse(&k.encode()).unwrap(), k);
    }

    #[test]
    fn malformed_keys_are_errors() {
        let with = |s: &str| {
            let mut m = [0u8; KEYS_LEN];
            m[..s.len()].copy_from_slice(s.as_bytes());
            Keys::parse(&m)
        };
        // Too few fields, a field that is not hex, a QPN beyond 24 bits, no trailing colon.
        assert!(with("0000:0001:000015:").is_err());
        assert!(with(&CAPTURED.replace("77a9b8", "77a9bx")).is_err());
        assert!(with(&CAPTURED.replace("000015", "1000015")).is_err());
        assert!(with(CAPTURED.strip_suffix(':').unwrap()).is_err());
        assert!(with(&CAPTURED.replace(":ff:ff:", ":ff:100:")).is_err());
        // No NUL anywhere, not text, and the 59-byte GID-less form.
        assert!(Keys::parse(&[b'0'; KEYS_LEN]).is_err());
        assert!(Keys::parse(&[0xc3, 0x28, 0]).is_err());
        let e = with("0000:0001:000015:77a9b8:00000645:000055cd78dde000:").unwrap_err();
        assert!(e.to_string().contains("6 fields instead of 23"), "{e}");
    }

    #[test]
    fn preamble_messages() {
        let v = version();
        assert_eq!(&v[..5], b"6.06\0");
        assert_eq!(parse_version(&v).unwrap(), (6, 6));
        assert!(parse_version(b"5.60\0").is_err());
        assert!(parse_version(b"hello\0").is_err());
        assert!(parse_version(b"6.06").is_err());
        assert_eq!(be32(4096), [0, 0, 0x10, 0]);
        assert_eq!(parse_pow2(&be32(64), "cache line", 4096).unwrap(), 64);
        assert!(parse_pow2(&be32(100), "cache line", 4096).is_err());
        assert!(parse_pow2(&be32(0), "cache line", 4096).is_err());
        assert_eq!(mtu_msg(Mtu::Mtu1024), *b"3\0");
        assert_eq!(parse_mtu(b"3\0").unwrap(), Mtu::Mtu1024);
        assert!(parse_mtu(b"6\0").is_err());
        assert!(parse_mtu(b"33").is_err());
        assert_eq!(min_mtu(Mtu::Mtu4096, Mtu::Mtu1024), Mtu::Mtu1024);
    }

    #[test]
    fn report_fields_round_trip_and_match_the_capture() {
        // The client's five REPORT fields of `ib_write_bw -s 4096 -n 5` in rc_write_bw.pcap.
        let hex = [
            "0000000000001000",
            "0000000000000005",
            "4006043cf1c1eb3f",
            "4006043cb59d260f",
            "3f471605e3728858",
        ];
        let mut f = [[0u8; 8]; 5];
        for (field, h) in f.iter_mut().zip(hex) {
            *field = u64::from_str_radix(h, 16).unwrap().to_be_bytes();
        }
        let r = BwReport::from_fields(&f);
        assert_eq!((r.size, r.iters), (4096, 5));
        assert!((r.bw_peak - 2.752).abs() < 1e-3, "{r:?}");
        assert!(r.bw_avg <= r.bw_peak);
        assert!((r.msg_rate - 0.000705).abs() < 1e-6, "{r:?}");
        assert_eq!(r.fields(), f);
    }
}
