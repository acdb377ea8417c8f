//! Reading RoCEv2 packets out of pcap and pcapng files, with the IP and UDP headers the ICRC
//! covers.

use anyhow::{bail, Context};
use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use pcap_file::TsResolution;
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
    /// The UDP payload: BTH through ICRC, or as much of it as was captured.
    pub payload: &'a [u8],
    /// The UDP payload's length on the wire, when the capture holds less of it (taken
    /// with a snap length, e.g. `tcpdump -s 256` to record headers only).
    pub cut_from: Option<usize>,
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
    /// RoCEv2 packets captured only in part (a snap length).
    pub cut: usize,
    /// TCP segments.
    pub tcp: usize,
}

/// One TCP segment, as captured (iWARP rides on TCP: `decode_iwarp.rs` puts the
/// segments back in order).
#[derive(Debug)]
pub struct TcpSegment<'a> {
    /// 1-based frame number in the file.
    pub frame: usize,
    /// Capture time since the Unix epoch.
    pub time: Duration,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The sequence number of its first byte (of the SYN, for a SYN).
    pub seq: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    /// As much of the payload as was captured.
    pub payload: &'a [u8],
}

/// A frame of interest: a RoCEv2 datagram or a TCP segment.
#[derive(Debug)]
pub enum Frame<'a> {
    Roce(RoceFrame<'a>),
    Tcp(TcpSegment<'a>),
}

/// Calls `f` for every UDP datagram to `port` in the pcap or pcapng file at `path`.
pub fn for_each_roce<F>(path: &Path, port: u16, mut f: F) -> anyhow::Result<FrameCounts>
where
    F: FnMut(&RoceFrame<'_>) -> anyhow::Result<()>,
{
    for_each_frame(path, port, |frame| match frame {
        Frame::Roce(r) => f(r),
        Frame::Tcp(_) => Ok(()),
    })
}

/// Calls `f` for every UDP datagram to `port` and every TCP segment in the pcap or
/// pcapng file at `path`, in the file's order.
pub fn for_each_frame<F>(path: &Path, port: u16, mut f: F) -> anyhow::Result<FrameCounts>
where
    F: FnMut(&Frame<'_>) -> anyhow::Result<()>,
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
        match classify(counts.frames, link, time, data, port) {
            Ok(Some(Frame::Roce(rf))) => {
                counts.roce += 1;
                counts.cut += usize::from(rf.cut_from.is_some());
                f(&Frame::Roce(rf))?;
            }
            Ok(Some(tcp)) => {
                counts.tcp += 1;
                f(&tcp)?;
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
        let header = r.header();
        // Raw records: pcap-file's checked ones refuse a record whose original length
        // exceeds the snap length, which is every packet cut short by that length.
        while let Some(p) = r.next_raw_packet() {
            let p = p.with_context(|| format!("corrupt packet record in {}", path.display()))?;
            let nanos = match header.ts_resolution {
                TsResolution::MicroSecond => u64::from(p.ts_frac) * 1000,
                TsResolution::NanoSecond => u64::from(p.ts_frac),
            };
            let time = Duration::from_secs(u64::from(p.ts_sec)) + Duration::from_nanos(nanos);
            frame(header.datalink, time, &p.data)?;
        }
    }
    Ok(counts)
}

/// Length of a Linux cooked capture (SLL) header; its protocol (an EtherType) ends it.
const SLL_LEN: usize = 16;

/// The RoCEv2 datagram or TCP segment in one frame, if it is one; `Err` if the frame's
/// headers cannot be read at all. Sliced laxly: a frame cut short by the snap length still
/// yields its IP and UDP headers and what it holds of the payload.
fn classify<'a>(
    index: usize,
    link: DataLink,
    time: Duration,
    data: &'a [u8],
    port: u16,
) -> Result<Option<Frame<'a>>, ()> {
    let sliced = match link {
        DataLink::ETHERNET => LaxSlicedPacket::from_ethernet(data).map_err(|_| ())?,
        DataLink::LINUX_SLL => {
            let proto = data.get(SLL_LEN - 2..SLL_LEN).ok_or(())?;
            let proto = EtherType(u16::from_be_bytes([proto[0], proto[1]]));
            LaxSlicedPacket::from_ether_type(proto, &data[SLL_LEN..])
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => {
            LaxSlicedPacket::from_ip(data).map_err(|_| ())?
        }
        _ => return Ok(None),
    };
    if sliced.net.is_none() || (sliced.transport.is_none() && sliced.stop_err.is_some()) {
        return Err(());
    }
    if let Some(TransportSlice::Tcp(tcp)) = &sliced.transport {
        let (src, dst) = addresses(&sliced).ok_or(())?;
        return Ok(Some(Frame::Tcp(TcpSegment {
            frame: index,
            time,
            src: SocketAddr::new(src, tcp.source_port()),
            dst: SocketAddr::new(dst, tcp.destination_port()),
            seq: tcp.sequence_number(),
            syn: tcp.syn(),
            fin: tcp.fin(),
            rst: tcp.rst(),
            payload: tcp.payload(),
        })));
    }
    Ok(udp_datagram(index, time, &sliced, port).map(Frame::Roce))
}

/// The IP source and destination of a sliced frame.
fn addresses(sliced: &LaxSlicedPacket<'_>) -> Option<(IpAddr, IpAddr)> {
    match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            Some((h.source_addr().into(), h.destination_addr().into()))
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            Some((h.source_addr().into(), h.destination_addr().into()))
        }
        _ => None,
    }
}

fn udp_datagram<'a>(
    index: usize,
    time: Duration,
    sliced: &LaxSlicedPacket<'a>,
    port: u16,
) -> Option<RoceFrame<'a>> {
    let Some(TransportSlice::Udp(udp)) = &sliced.transport else {
        return None;
    };
    if udp.destination_port() != port {
        return None;
    }
    let (ip_hdr, src, dst): (&[u8], IpAddr, IpAddr) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                h.slice(),
                h.source_addr().into(),
                h.destination_addr().into(),
            )
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
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
    // The UDP length field says how long the payload was on the wire.
    let wire_len = usize::from(udp.length()).saturating_sub(8);
    let payload = udp.payload();
    let cut_from = (payload.len() < wire_len).then_some(wire_len);
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
        payload,
        cut_from,
    })
}
