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

/// The one's-complement sum of 16-bit words that IP and UDP checksums use.
fn ones_sum(mut sum: u32, bytes: &[u8]) -> u32 {
    for w in bytes.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IPv4 header checksum, so tools that check it are content.
fn ipv4_checksum(h: &mut [u8]) {
    h[10..12].fill(0);
    let sum = fold(ones_sum(0, &h[..20]));
    h[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// The UDP checksum the kernel puts on what we send (`frame`: IP, UDP, payload).
fn udp_checksum(frame: &mut [u8]) {
    let (ip_len, pseudo) = if frame[0] >> 4 == 4 {
        (20, ones_sum(ones_sum(0, &frame[12..20]), &[0, 17]))
    } else {
        (40, ones_sum(ones_sum(0, &frame[8..40]), &[0, 17]))
    };
    let udp_len = (frame.len() - ip_len) as u16;
    frame[ip_len + 6..ip_len + 8].fill(0);
    let sum = fold(ones_sum(
        ones_sum(pseudo, &udp_len.to_be_bytes()),
        &frame[ip_len..],
    ));
    // Zero means "no checksum": a computed zero is sent as all ones.
    let sum = if sum == 0 { 0xffff } else { sum };
    frame[ip_len + 6..ip_len + 8].copy_from_slice(&sum.to_be_bytes());
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
            ipv4_checksum(&mut self.frame[..20]);
        }
        self.frame.extend_from_slice(payload);
        if sent {
            udp_checksum(&mut self.frame);
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

    #[test]
    fn udp_checksum_verifies() {
        // A frame verifies when its one's-complement sum, pseudo header included, is ~0.
        for ip in [
            oxrdma_wire::icrc::ipv4_udp_header([10, 0, 0, 1], [10, 0, 0, 2], 0, 49152, 4791, 21)
                .to_vec(),
            oxrdma_wire::icrc::ipv6_udp_header([0xfd; 16], [0x01; 16], 49152, 4791, 21).to_vec(),
        ] {
            let mut frame = ip.clone();
            frame.extend_from_slice(&[0x5a; 21]);
            ipv4_checksum_if_v4(&mut frame);
            udp_checksum(&mut frame);
            let ip_len = ip.len() - 8;
            let (src_dst, udp_len) = if ip_len == 20 {
                (&frame[12..20], (frame.len() - 20) as u16)
            } else {
                (&frame[8..40], (frame.len() - 40) as u16)
            };
            let sum = ones_sum(
                ones_sum(
                    ones_sum(ones_sum(0, src_dst), &[0, 17]),
                    &udp_len.to_be_bytes(),
                ),
                &frame[ip_len..],
            );
            assert_eq!(fold(sum), 0, "ip header length {ip_len}");
            assert_ne!(frame[ip_len + 6..ip_len + 8], [0, 0]);
        }
    }

    fn ipv4_checksum_if_v4(frame: &mut [u8]) {
        if frame[0] >> 4 == 4 {
            ipv4_checksum(&mut frame[..20]);
        }
    }
}
