//! Source sockets connected to their peer. A packet sent on a connected UDP socket without
//! an address reuses the route the socket keeps; one sent with an address looks the route
//! up each time: 0.2-0.4 us of an 8 B half round trip here.
//!
//! The catch is IPv4's Identification, which the ICRC covers. An unconnected socket with
//! DF set sends ID 0 (and 0, 1, 2, ... for the segments of a GSO message); a connected one
//! numbers everything it sends from its own counter, which `connect` starts at a random
//! value; how a message takes its IDs from it is the kernel's business (`Step`). So after
//! connecting, the socket sends three probes to a throwaway socket of our own, one packet,
//! a two-segment GSO message and one packet, with transmit timestamps on: the kernel hands
//! each back on the socket's error queue with the IP header it really sent. From then on the
//! device counts the segments it sends; where the count may have gone wrong (a send failed
//! for a reason that may come after the ID was taken) it probes again before the next
//! send. A socket whose IDs cannot be learned is not connected. IPv6 has no ID.

use crate::sockopt::set_int;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How a connected socket's messages take their IDs from its counter. Linux 6.18 (and 6.1,
/// by its source) take one per message: a GSO message's segments are numbered from it on
/// (first, first + 1, ...) and the next message's first is one past this one's, so IDs
/// overlap, which DF packets allow. A kernel that takes one per segment gives the first
/// segment the counter before (`SegmentBefore`) or after (`SegmentAfter`) it grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Message,
    SegmentBefore,
    SegmentAfter,
}

/// What the kernel puts in the IPv4 Identification of a socket's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ids {
    /// Not connected (DF set), or IPv6: 0, 1, 2, ... within each message.
    PerMessage,
    /// Connected IPv4: the socket's counter, and how messages take from it.
    Counter(u16, Step),
}

/// Where a message stands in its system call: the messages and segments sent before it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Before {
    pub msgs: usize,
    pub segs: usize,
}

impl Ids {
    /// The ID of segment `k` of a message of `segs` segments sent after `before` in the
    /// same system call.
    pub fn of(self, before: Before, segs: usize, k: usize) -> u16 {
        let (c, first) = match self {
            Ids::PerMessage => return crate::gso::ipv4_id(k),
            Ids::Counter(c, Step::Message) => (c, before.msgs),
            Ids::Counter(c, Step::SegmentBefore) => (c, before.segs),
            Ids::Counter(c, Step::SegmentAfter) => (c, before.segs + segs),
        };
        c.wrapping_add((first + k) as u16)
    }

    /// After `sent` (messages and segments) left.
    pub fn advance(self, sent: Before) -> Ids {
        match self {
            Ids::Counter(c, step) => {
                let n = if step == Step::Message {
                    sent.msgs
                } else {
                    sent.segs
                };
                Ids::Counter(c.wrapping_add(n as u16), step)
            }
            Ids::PerMessage => Ids::PerMessage,
        }
    }
}

/// How long a probe may take to come back on the error queue (it is queued while the
/// probe is sent; this only bounds a kernel that never does).
const PROBE_WAIT: Duration = Duration::from_millis(100);

/// The probe's segment length: any RoCE-sized packet would do, nothing reads it.
const PROBE_LEN: usize = 20;

/// Connects `socket` to `peer`; returns how its packets will be numbered, or None if it
/// is left unconnected (`Ids::PerMessage`, as before): it could not be connected, or its
/// IDs could not be learned.
pub(crate) fn connect(socket: &UdpSocket, peer: SocketAddr) -> Option<Ids> {
    socket.connect(peer).ok()?;
    if peer.is_ipv6() {
        return Some(Ids::PerMessage);
    }
    match probe(socket) {
        Some(ids) => Some(ids),
        None => {
            // Unconnected again, the kernel sends ID 0 as before.
            let _ = rustix::net::connect_unspec(socket);
            None
        }
    }
}

/// Learns the counter of `socket` (connected, IPv4) and how the kernel steps it: the IDs
/// of one packet, a two-segment message and one packet, sent to a throwaway socket.
pub(crate) fn probe(socket: &UdpSocket) -> Option<Ids> {
    let from = socket.local_addr().ok()?;
    let sink = UdpSocket::bind(SocketAddr::new(from.ip(), 0)).ok()?;
    let to = sink.local_addr().ok()?;
    set_tx_timestamps(socket, true).ok()?;
    let ids = (|| {
        drain_error_queue(socket);
        let a = sent_id(socket, to, 1)?;
        let b = sent_id(socket, to, 2)?;
        let c = sent_id(socket, to, 1)?;
        step_of(a, b, c)
    })();
    let off = set_tx_timestamps(socket, false);
    drain_error_queue(socket);
    off.ok()?;
    ids
}

/// The counter and step that gave IDs `a` (one packet), `b` (the first of two segments)
/// and `c` (one packet) to three messages in a row; None if no rule explains them
/// (something else took IDs meanwhile).
pub(crate) fn step_of(a: u16, b: u16, c: u16) -> Option<Ids> {
    match (b.wrapping_sub(a), c.wrapping_sub(b)) {
        (1, 1) => Some(Ids::Counter(c.wrapping_add(1), Step::Message)),
        (1, 2) => Some(Ids::Counter(c.wrapping_add(1), Step::SegmentBefore)),
        (2, 1) => Some(Ids::Counter(c, Step::SegmentAfter)),
        _ => None,
    }
}

/// Sends a probe of `segs` segments from `socket` to `to` and returns the IPv4 ID of its
/// first segment, as the kernel reports it on the error queue.
fn sent_id(socket: &UdpSocket, to: SocketAddr, segs: usize) -> Option<u16> {
    let probe = [0u8; 2 * PROBE_LEN];
    let gso = if segs > 1 { PROBE_LEN } else { 0 };
    set_gso_size(socket, gso).ok()?;
    let sent = send_probe(socket, &probe[..segs * PROBE_LEN], to);
    let reset = set_gso_size(socket, 0);
    sent?;
    reset.ok()?;
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (socket.local_addr().ok()?.ip(), to.ip()) else {
        return None;
    };
    let deadline = Instant::now() + PROBE_WAIT;
    let mut buf = [0u8; 256];
    while Instant::now() < deadline {
        match recv_error_queue(socket, &mut buf) {
            Ok(n) => {
                if let Some(id) = ipv4_id_in(&buf[..n], src.octets(), dst.octets(), to.port()) {
                    return Some(id);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(_) => return None,
        }
    }
    None
}

/// The ID of the IPv4 + UDP header from `src` to `dst`:`dport` found in `frame` (a packet
/// as the error queue returns it, behind whatever link-layer header its device has).
pub(crate) fn ipv4_id_in(frame: &[u8], src: [u8; 4], dst: [u8; 4], dport: u16) -> Option<u16> {
    (0..frame.len().saturating_sub(27)).find_map(|at| {
        let h = &frame[at..at + 28];
        let found = h[0] == 0x45
            && h[9] == 17
            && h[12..16] == src
            && h[16..20] == dst
            && h[22..24] == dport.to_be_bytes();
        found.then(|| u16::from_be_bytes([h[4], h[5]]))
    })
}

/// The probe leaves a non-blocking socket: a full send buffer is waited out briefly.
fn send_probe(socket: &UdpSocket, probe: &[u8], to: SocketAddr) -> Option<()> {
    for _ in 0..100 {
        match socket.send_to(probe, to) {
            Ok(_) => return Some(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return None,
        }
    }
    None
}

/// Turns transmit timestamps taken as packets are queued to the device on or off; without
/// `OPT_TSONLY` each comes back with the packet, headers included.
fn set_tx_timestamps(socket: &UdpSocket, on: bool) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_TX_SCHED | libc::SOF_TIMESTAMPING_SOFTWARE;
    set_int(
        socket,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        if on { flags as libc::c_int } else { 0 },
    )
}

/// Sets the socket's GSO segment size (0: none), for the messages it sends without one.
fn set_gso_size(socket: &UdpSocket, size: usize) -> io::Result<()> {
    set_int(
        socket,
        libc::SOL_UDP,
        libc::UDP_SEGMENT,
        size as libc::c_int,
    )
}

/// Takes one entry off the socket's error queue into `buf` (its control messages are
/// dropped); returns its length.
fn recv_error_queue(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 64];
    // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at `iov` (over `buf`) and `control`, all live and of the
    // lengths given, for the call.
    let n = unsafe {
        libc::recvmsg(
            socket.as_raw_fd(),
            &raw mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Empties the socket's error queue (old timestamps, ICMP reports).
fn drain_error_queue(socket: &UdpSocket) {
    let mut buf = [0u8; 256];
    for _ in 0..64 {
        if recv_error_queue(socket, &mut buf).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_step() {
        // Two messages in one call: 3 segments, then 2.
        let (first, second) = (Before::default(), Before { msgs: 1, segs: 3 });
        let msg = Ids::Counter(100, Step::Message);
        assert_eq!([0, 1, 2].map(|k| msg.of(first, 3, k)), [100, 101, 102]);
        assert_eq!([0, 1].map(|k| msg.of(second, 2, k)), [101, 102]);
        let sent = Before { msgs: 2, segs: 5 };
        assert_eq!(msg.advance(sent), Ids::Counter(102, Step::Message));
        let seg = Ids::Counter(100, Step::SegmentBefore);
        assert_eq!([0, 1].map(|k| seg.of(second, 2, k)), [103, 104]);
        assert_eq!(seg.advance(sent), Ids::Counter(105, Step::SegmentBefore));
        let after = Ids::Counter(100, Step::SegmentAfter);
        assert_eq!([0, 1, 2].map(|k| after.of(first, 3, k)), [103, 104, 105]);
        assert_eq!([0, 1].map(|k| after.of(second, 2, k)), [105, 106]);
        let wrap = Ids::Counter(u16::MAX, Step::Message);
        assert_eq!(wrap.of(first, 2, 1), 0);
        assert_eq!(Ids::PerMessage.of(second, 3, 2), 2);
    }

    #[test]
    fn the_step_is_told_from_three_probes() {
        // What each kernel rule gives one packet, two segments, one packet from counter 7.
        assert_eq!(step_of(7, 8, 9), Some(Ids::Counter(10, Step::Message)));
        assert_eq!(
            step_of(7, 8, 10),
            Some(Ids::Counter(11, Step::SegmentBefore))
        );
        assert_eq!(
            step_of(8, 10, 11),
            Some(Ids::Counter(11, Step::SegmentAfter))
        );
        assert_eq!(
            step_of(u16::MAX, 0, 1),
            Some(Ids::Counter(2, Step::Message))
        );
        assert_eq!(step_of(7, 9, 11), None);
        assert_eq!(step_of(7, 7, 7), None);
    }

    #[test]
    fn the_ip_header_is_found_behind_any_link_header() {
        let mut frame = vec![0xeeu8; 14];
        let mut h = [0u8; 28];
        h[0] = 0x45;
        h[4..6].copy_from_slice(&0xbeefu16.to_be_bytes());
        h[9] = 17;
        h[12..16].copy_from_slice(&[10, 0, 0, 1]);
        h[16..20].copy_from_slice(&[10, 0, 0, 2]);
        h[22..24].copy_from_slice(&4791u16.to_be_bytes());
        frame.extend_from_slice(&h);
        frame.extend_from_slice(&[0; 20]);
        let id = |f: &[u8]| ipv4_id_in(f, [10, 0, 0, 1], [10, 0, 0, 2], 4791);
        assert_eq!(id(&frame), Some(0xbeef));
        assert_eq!(id(&frame[14..]), Some(0xbeef));
        assert_eq!(ipv4_id_in(&frame, [10, 0, 0, 9], [10, 0, 0, 2], 4791), None);
        assert_eq!(id(&frame[..30]), None, "cut short");
    }

    #[test]
    fn a_probe_after_a_failed_send_finds_the_id_it_took() {
        // A GSO message of more segments than the kernel allows is refused (EINVAL) after
        // it was numbered: counting only what was sent would be one short from then on.
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let Some(ids) = connect(&socket, sink.local_addr().unwrap()) else {
            panic!("a loopback socket's IDs could not be learned");
        };
        let Ids::Counter(c, Step::Message) = ids else {
            panic!("this kernel steps IDs as {ids:?}: extend this test to it");
        };
        set_gso_size(&socket, 8).unwrap();
        let refused = socket.send(&[0u8; 8 * 200]);
        set_gso_size(&socket, 0).unwrap();
        assert!(refused.is_err(), "200 segments were taken");
        socket.send(&[0u8; 8]).unwrap();
        let again = probe(&socket).expect("probed again");
        // The three probes took three IDs after the refused message and the packet.
        assert_eq!(again, Ids::Counter(c.wrapping_add(2 + 3), Step::Message));
    }
}
