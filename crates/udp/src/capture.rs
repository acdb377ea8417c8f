//! Packet capture to pcap (link type RAW: IPv4 or IPv6 frames), for `--pcap`.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::SystemTime;

/// Unbuffered: every frame is in the file once written, so a process killed mid-run (a
/// test's timeout) still leaves a capture whose every record is whole. Capturing costs a
/// system call per frame; it is a debugging aid.
pub(crate) struct Capture {
    writer: PcapWriter<File>,
    frame: Vec<u8>,
}

/// The IPv4 header checksum, so tools that check it are content.
fn ipv4_checksum(h: &mut [u8]) {
    h[10..12].fill(0);
    let mut sum: u32 = h[..20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

impl Capture {
    pub fn create(path: &Path) -> io::Result<Capture> {
        let file = File::create(path)?;
        let header = PcapHeader {
            datalink: DataLink::RAW,
            ..Default::default()
        };
        let writer = PcapWriter::with_header(file, header).map_err(io::Error::other)?;
        Ok(Capture {
            writer,
            frame: Vec::with_capacity(4200),
        })
    }

    /// Writes one frame: the IP+UDP headers (as sent) and the UDP payload.
    pub fn write(&mut self, ip_udp: &[u8], payload: &[u8]) {
        self.frame.clear();
        self.frame.extend_from_slice(ip_udp);
        if ip_udp[0] >> 4 == 4 {
            ipv4_checksum(&mut self.frame[..20]);
        }
        self.frame.extend_from_slice(payload);
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let len = self.frame.len() as u32;
        // A full disk loses capture frames, never RDMA traffic.
        let _ = self
            .writer
            .write_packet(&PcapPacket::new(ts, len, &self.frame));
    }
}
