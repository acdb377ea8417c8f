//! Reading RoCEv2 packets out of pcap and pcapng files, with the IP and UDP headers the ICRC
//! covers.

use anyhow::{bail, Context};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

/// Largest IPv4 header plus a UDP header.
const MAX_IP_UDP: usize = 68;

/// One UDP datagram to the RoCEv2 port, as captured.
#[derive(Debug)]
pub struct RoceFrame<'a> {
    /// 1-based frame number in the file, as Wireshark counts.
    pub frame: usize,
    /// Capture time since the Unix epoch.
    pub time: Duration,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    ip_udp: [u8; MAX_IP_UDP],
    ip_udp_len: usize,
    /// The UDP payload: BTH through ICRC.
    pub payload: &'a [u8],
}

impl RoceFrame<'_> {
    /// The IP header followed by the UDP header, as the ICRC needs them.
    pub fn ip_udp(&self) -> &[u8] {
        &self.ip_udp[..self.ip_udp_len]
    }
}

/// What a file held besides RoCEv2 packets.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FrameCounts {
    /// All frames read.
    pub frames: usize,
    /// Frames that are UDP to the RoCEv2 port.
    pub roce: usize,
    /// Frames whose headers could not be read (cut short by the capture's snap length, or
    /// broken): whether they were RoCE is unknown.
    pub unreadable: usize,
}

/// Calls `f` for every UDP datagram to `port` in the pcap or pcapng file at `path`.
pub fn for_each_roce<F>(path: &Path, port: u16, mut f: F) -> anyhow::Result<FrameCounts>
where
    F: FnMut(&RoceFrame<'_>) -> anyhow::Result<()>,
{
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic)
        .with_context(|| format!("cannot read a capture from {}", path.display()))?;
    file.seek(SeekFrom::Start(0))?;
    let reader = BufReader::new(file);
    let mut counts = FrameCounts::default();
    let mut frame = |link: DataLink, time: Duration, data: &[u8]| -> anyhow::Result<()> {
        counts.frames += 1;
        match roce_frame(counts.frames, link, time, data, port) {
            Ok(Some(rf)) => {
                counts.roce += 1;
                f(&rf)?;
            }
            Ok(None) => {}
            Err(()) => counts.unreadable += 1,
        }
        Ok(())
    };
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(reader)
            .with_context(|| format!("{} is not a valid pcapng file", path.display()))?;
        let mut links = Vec::new();
        while let Some(block) = r.next_block() {
            match block.with_context(|| format!("corrupt block in {}", path.display()))? {
                Block::InterfaceDescription(idb) => links.push(idb.linktype),
                Block::EnhancedPacket(p) => {
                    let Some(&link) = links.get(p.interface_id as usize) else {
                        bail!("packet names unknown interface {}", p.interface_id);
                    };
                    frame(link, p.timestamp, &p.data)?;
                }
                Block::SimplePacket(p) => {
                    let link = *links
                        .first()
                        .context("simple packet before any interface")?;
                    frame(link, Duration::ZERO, &p.data)?;
                }
                _ => {}
            }
        }
    } else {
        let mut r = PcapReader::new(reader)
            .with_context(|| format!("{} is not a pcap or pcapng file", path.display()))?;
        let link = r.header().datalink;
        while let Some(p) = r.next_packet() {
            let p = p.with_context(|| format!("corrupt packet record in {}", path.display()))?;
            frame(link, p.timestamp, &p.data)?;
        }
    }
    Ok(counts)
}

/// The RoCEv2 datagram in one frame, if it is one; `Err` if the frame's headers cannot be
/// read at all.
fn roce_frame<'a>(
    index: usize,
    link: DataLink,
    time: Duration,
    data: &'a [u8],
    port: u16,
) -> Result<Option<RoceFrame<'a>>, ()> {
    let sliced = match link {
        DataLink::ETHERNET => SlicedPacket::from_ethernet(data),
        DataLink::LINUX_SLL => SlicedPacket::from_linux_sll(data),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => SlicedPacket::from_ip(data),
        _ => return Ok(None),
    }
    .map_err(|_| ())?;
    Ok(udp_datagram(index, time, &sliced, port))
}

fn udp_datagram<'a>(
    index: usize,
    time: Duration,
    sliced: &SlicedPacket<'a>,
    port: u16,
) -> Option<RoceFrame<'a>> {
    let Some(TransportSlice::Udp(udp)) = &sliced.transport else {
        return None;
    };
    if udp.destination_port() != port {
        return None;
    }
    let (ip_hdr, src, dst): (&[u8], IpAddr, IpAddr) = match &sliced.net {
        Some(NetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                h.slice(),
                h.source_addr().into(),
                h.destination_addr().into(),
            )
        }
        Some(NetSlice::Ipv6(v6)) => {
            let h = v6.header();
            (
                h.slice(),
                h.source_addr().into(),
                h.destination_addr().into(),
            )
        }
        _ => return None,
    };
    let udp_hdr = udp.header_slice();
    let ip_udp_len = ip_hdr.len() + udp_hdr.len();
    if ip_udp_len > MAX_IP_UDP {
        return None;
    }
    let mut ip_udp = [0u8; MAX_IP_UDP];
    ip_udp[..ip_hdr.len()].copy_from_slice(ip_hdr);
    ip_udp[ip_hdr.len()..ip_udp_len].copy_from_slice(udp_hdr);
    Some(RoceFrame {
        frame: index,
        time,
        src: SocketAddr::new(src, udp.source_port()),
        dst: SocketAddr::new(dst, udp.destination_port()),
        ip_udp,
        ip_udp_len,
        payload: udp.payload(),
    })
}
