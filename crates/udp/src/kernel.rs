//! The kernel's own UDP drop counters (`/proc/net/snmp`, `/proc/net/snmp6`). Datagrams the
//! kernel drops never reach our socket, so no counter of ours can see them; these can, if
//! only for the whole network namespace.

use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// UDP datagrams the kernel dropped in this network namespace, IPv4 and IPv6 together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelUdpDrops {
    /// Bad UDP checksum (for IPv6 also a zero one, unless the socket accepts those).
    pub checksum: u64,
    /// A socket's receive buffer was full.
    pub rcvbuf: u64,
    /// Every receive error, the two above included.
    pub errors: u64,
}

/// The kernel's counter files of the network namespace they were opened in (a file under
/// `/proc/thread-self/net` stays with its namespace, whichever thread reads it later).
#[derive(Debug)]
pub struct KernelCounters {
    snmp: Option<File>,
    snmp6: Option<File>,
}

impl KernelCounters {
    /// Opens the calling thread's namespace's counters.
    pub fn open() -> KernelCounters {
        let open = |f| File::open(format!("/proc/thread-self/net/{f}")).ok();
        KernelCounters {
            snmp: open("snmp"),
            snmp6: open("snmp6"),
        }
    }

    /// The counters now, IPv4 and IPv6 together; zero where they cannot be read.
    pub fn read(&self) -> KernelUdpDrops {
        let text = |f: &Option<File>| {
            let mut s = String::new();
            if let Some(mut f) = f.as_ref() {
                if f.seek(SeekFrom::Start(0)).is_err() || f.read_to_string(&mut s).is_err() {
                    s.clear();
                }
            }
            s
        };
        let mut d = parse_snmp(&text(&self.snmp));
        let d6 = parse_snmp6(&text(&self.snmp6));
        d.checksum += d6.checksum;
        d.rcvbuf += d6.rcvbuf;
        d.errors += d6.errors;
        d
    }
}

impl KernelUdpDrops {
    /// What grew since `earlier`.
    pub fn since(&self, earlier: &KernelUdpDrops) -> KernelUdpDrops {
        KernelUdpDrops {
            checksum: self.checksum.saturating_sub(earlier.checksum),
            rcvbuf: self.rcvbuf.saturating_sub(earlier.rcvbuf),
            errors: self.errors.saturating_sub(earlier.errors),
        }
    }
}

impl fmt::Display for KernelUdpDrops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let other = self.errors.saturating_sub(self.checksum + self.rcvbuf);
        write!(
            f,
            "{} bad UDP checksum, {} receive buffer full, {} other",
            self.checksum, self.rcvbuf, other
        )
    }
}

/// `/proc/net/snmp`: a "Udp:" line of names followed by a "Udp:" line of values.
fn parse_snmp(text: &str) -> KernelUdpDrops {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return KernelUdpDrops::default();
    };
    let pairs: Vec<(&str, u64)> = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .map(|(n, v)| (n, v.parse().unwrap_or(0)))
        .collect();
    from_pairs(pairs.into_iter())
}

/// `/proc/net/snmp6`: one "Udp6Name value" per line.
fn parse_snmp6(text: &str) -> KernelUdpDrops {
    from_pairs(text.lines().filter_map(|l| {
        let mut w = l.split_whitespace();
        let name = w.next()?.strip_prefix("Udp6")?;
        Some((name, w.next()?.parse().ok()?))
    }))
}

fn from_pairs<'a>(pairs: impl Iterator<Item = (&'a str, u64)>) -> KernelUdpDrops {
    let mut d = KernelUdpDrops::default();
    for (name, v) in pairs {
        match name {
            "InCsumErrors" => d.checksum = v,
            "RcvbufErrors" => d.rcvbuf = v,
            "InErrors" => d.errors = v,
            _ => {}
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_proc_formats() {
        let v4 = "Ip: Forwarding\nIp: 1\nUdp: InDatagrams NoPorts InErrors OutDatagrams \
                  RcvbufErrors SndbufErrors InCsumErrors\nUdp: 36 0 9 37 2 0 5\n\
                  UdpLite: InDatagrams InErrors\nUdpLite: 7 7\n";
        let d = parse_snmp(v4);
        assert_eq!((d.checksum, d.rcvbuf, d.errors), (5, 2, 9));
        let v6 = "Ip6InReceives 3\nUdp6InErrors    \t4\nUdp6RcvbufErrors 1\n\
                  Udp6InCsumErrors 3\nUdpLite6InErrors 8\n";
        let d6 = parse_snmp6(v6);
        assert_eq!((d6.checksum, d6.rcvbuf, d6.errors), (3, 1, 4));
        assert_eq!(
            d.since(&d6).to_string(),
            "2 bad UDP checksum, 1 receive buffer full, 2 other"
        );
        assert_eq!(parse_snmp(""), KernelUdpDrops::default());
    }
}
