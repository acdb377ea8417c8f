//! Packet capture to pcap (link type RAW: IPv4 or IPv6 frames), for `--pcap`.

use oxrdma_wire::checksum;
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

/// The UDP checksum the kernel puts on what we send (`frame`: IP, UDP, payload).
fn fill_udp_checksum(frame: &mut [u8]) {
    let (ip_len, addrs) = if frame[0] >> 4 == 4 {
        (20, 12..20)
    } else {
        (40, 8..40)
    };
    let (ip, udp) = frame.split_at_mut(ip_len);
    let addrs = &ip[addrs];
    let (src, dst) = addrs.split_at(addrs.len() / 2);
    let c = checksum::udp(src, dst, udp);
    udp[6..8].copy_from_slice(&c.to_be_bytes());
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

    /// Writes one frame: the IP+UDP headers and the UDP payload. Frames we `sent` get the
    /// UDP checksum the kernel gives them; received ones keep a zero one (the socket does
    /// not show what arrived, and zero is what Linux rxe sends).
    pub fn write(&mut self, ip_udp: &[u8], payload: &[u8], sent: bool) {
        self.frame.clear();
        self.frame.extend_from_slice(ip_udp);
        if ip_udp[0] >> 4 == 4 {
            checksum::fill_ipv4(&mut self.frame);
        }
        self.frame.extend_from_slice(payload);
        if sent {
            fill_udp_checksum(&mut self.frame);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use oxrdma_wire::icrc::{ipv4_udp_header, ipv6_udp_header};

    #[test]
    fn sent_frames_get_a_udp_checksum_that_verifies() {
        for ip in [
            ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 0, 49152, 4791, 21).to_vec(),
            ipv6_udp_header([0xfd; 16], [0x01; 16], 49152, 4791, 21).to_vec(),
        ] {
            let ip_len = ip.len() - 8;
            let mut frame = ip;
            frame.extend_from_slice(&[0x5a; 21]);
            fill_udp_checksum(&mut frame);
            let (src, dst) = if ip_len == 20 {
                (&frame[12..16], &frame[16..20])
            } else {
                (&frame[8..24], &frame[24..40])
            };
            let stored = u16::from_be_bytes([frame[ip_len + 6], frame[ip_len + 7]]);
            assert_eq!(stored, checksum::udp(src, dst, &frame[ip_len..]));
            assert_ne!(stored, 0);
        }
    }
}
