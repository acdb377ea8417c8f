//! Batched datagram I/O: up to [`BATCH`] messages per system call (`sendmmsg`,
//! `recvmmsg`), each message one packet or, with UDP GSO and GRO, a run of packets to or
//! from one peer (`gso.rs`), so a burst of MTU packets or a train of small WRITEs costs one
//! kernel crossing, not one per packet.

use oxrdma_core::MAX_PACKET;
use oxrdma_wire::{icrc, icrc_part};
use std::io;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;

/// Packets per system call: four full GSO runs of 4 KiB RoCE packets (15 fit in 64 KiB),
/// or one of 1 KiB packets. 60 rather than 32 (runs of 15, 15 and 2): 1.12x 64 KiB WRITE
/// on loopback, 1.09x on a veth pair at MTU 1500.
pub const BATCH: usize = 60;

/// Room for what may arrive (anything longer is truncated and fails its ICRC).
const RX_SLOT: usize = MAX_PACKET + 64;

/// Room for a source address, and for control messages, in each received message.
const NAME_LEN: u32 = std::mem::size_of::<libc::sockaddr_storage>() as u32;
const CONTROL_LEN: usize = std::mem::size_of::<GroControl>();

/// Packets waiting to be sent: packet `i` is `len[i]` bytes at `off[i]` for `dest[i]`.
/// They lie back to back (each starts where the one before ended), so a run of them is
/// one iovec: the kernel's copy of a message of 60 1-KiB packets as 60 iovecs cost 1.25x
/// that of one (`udp_ceiling`-style sender on this host's veth pair).
#[derive(Debug)]
pub struct TxBatch {
    buf: Vec<u8>,
    off: [usize; BATCH],
    /// Bytes of `buf` the packets take.
    used: usize,
    pub len: [usize; BATCH],
    pub dest: [Option<SocketAddr>; BATCH],
    /// The UDP source port each packet asks for (0: the port's own).
    pub src: [u16; BATCH],
    /// Whether each packet's ICRC field holds its transport part (`icrc_part`), which
    /// the port completes, rather than nothing, which it fills whole.
    pub part: [bool; BATCH],
    /// Each such packet's transport part as the engine left it: sealing overwrites it
    /// with the whole ICRC, and a packet sealed again (the rest of a system call after a
    /// skipped message, with fresh IPv4 IDs) must start from the part, not from that.
    parts: [u32; BATCH],
    pub count: usize,
}

impl Default for TxBatch {
    fn default() -> Self {
        TxBatch {
            buf: vec![0; BATCH * MAX_PACKET],
            off: [0; BATCH],
            used: 0,
            len: [0; BATCH],
            dest: [None; BATCH],
            src: [0; BATCH],
            part: [false; BATCH],
            parts: [0; BATCH],
            count: 0,
        }
    }
}

impl TxBatch {
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }
    /// Room for the next packet, [`MAX_PACKET`] bytes (the caller writes a packet into it
    /// and then `push`es).
    pub fn next_slot(&mut self) -> &mut [u8] {
        &mut self.buf[self.used..self.used + MAX_PACKET]
    }
    /// Room for every packet still to come, [`MAX_PACKET`] bytes each (for the engine's
    /// `poll_transmit_many`, which writes them back to back; `push` each, in order). In
    /// bounds: `used` is at most `count` packets of [`MAX_PACKET`].
    pub fn free_slots(&mut self) -> &mut [u8] {
        let room = (BATCH - self.count) * MAX_PACKET;
        &mut self.buf[self.used..self.used + room]
    }
    /// Empties the batch.
    pub fn clear(&mut self) {
        (self.count, self.used) = (0, 0);
    }
    /// Takes the packet just written into the next slot.
    pub fn push(&mut self, dest: SocketAddr, len: usize) {
        self.push_from(dest, 0, len);
    }
    /// Takes the packet just written into the next slot, to leave from UDP port `src`.
    pub fn push_from(&mut self, dest: SocketAddr, src: u16, len: usize) {
        self.push_with(dest, src, len, false);
    }
    /// Takes the packet the engine just wrote into the next slot (`poll_transmit_many`),
    /// to leave from UDP port `src`: a long one carries its transport part.
    pub fn push_engine(&mut self, dest: SocketAddr, src: u16, len: usize) {
        let part = icrc_part::carries_part(len.saturating_sub(icrc::ICRC_LEN));
        self.push_with(dest, src, len, part);
    }
    fn push_with(&mut self, dest: SocketAddr, src: u16, len: usize, part: bool) {
        let i = self.count;
        (self.len[i], self.dest[i], self.src[i]) = (len, Some(dest), src);
        self.part[i] = part;
        self.off[i] = self.used;
        if part {
            let p = &self.buf[self.used..self.used + len];
            self.parts[i] = icrc::carried(p).unwrap_or(0);
        }
        self.used += len;
        self.count += 1;
    }
    /// Packet `i`, mutable (the port fills in its ICRC).
    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.buf[self.off[i]..self.off[i] + self.len[i]]
    }

    /// Packet `i`, ready to be sealed (again): a packet that carries its transport part
    /// gets it back in its ICRC field.
    pub fn to_seal(&mut self, i: usize) -> &mut [u8] {
        let (part, carried) = (self.part[i], self.parts[i]);
        let p = self.packet_mut(i);
        if part {
            let end = p.len() - icrc::ICRC_LEN;
            p[end..].copy_from_slice(&carried.to_le_bytes());
        }
        p
    }

    /// Sends `runs` with one `sendmmsg`: each a range of positions in `order` (which
    /// lists slots; see [`crate::gso::runs`]) going to one peer, a run of more than one
    /// packet as one message the kernel cuts into them (`UDP_SEGMENT`); returns how many
    /// runs the kernel took (at least one unless it returned an error).
    pub fn send(
        &self,
        socket: &UdpSocket,
        order: &[usize],
        runs: &[Range<usize>],
        peer: Option<SocketAddr>,
    ) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let n = runs.len().min(BATCH);
        let base = self.buf.as_ptr();
        // A run's message gathers its packets in order: one iovec for each stretch of them
        // that lies back to back in `buf` (a QP's whole run, usually). `at[k]` is run k's
        // first iovec; only the entries written are read.
        let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
        let (mut at, mut used) = ([0usize; BATCH + 1], 0);
        let mut write = |used: &mut usize, (off, len): (usize, usize)| {
            iovs[*used].write(libc::iovec {
                iov_base: base.wrapping_add(off).cast_mut().cast(),
                iov_len: len,
            });
            *used += 1;
        };
        for (k, r) in runs.iter().take(n).enumerate() {
            at[k] = used;
            // The stretch being gathered: where it starts, and its length.
            let mut stretch: Option<(usize, usize)> = None;
            for &i in &order[r.clone()] {
                let (off, len) = (self.off[i], self.len[i]);
                stretch = match stretch {
                    Some((s, l)) if s + l == off => Some((s, l + len)),
                    Some(done) => {
                        write(&mut used, done);
                        Some((off, len))
                    }
                    None => Some((off, len)),
                };
            }
            if let Some(done) = stretch {
                write(&mut used, done);
            }
        }
        at[n] = used;
        // Only the `n` entries sent are written: zeroing all BATCH of them (7.5 KiB) cost
        // more than the rest of a small send.
        let mut names =
            [const { MaybeUninit::<(libc::sockaddr_storage, libc::socklen_t)>::uninit() }; BATCH];
        let mut controls = [const { MaybeUninit::<Segment>::uninit() }; BATCH];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        for (k, r) in runs.iter().take(n).enumerate() {
            let dest = self.dest[order[r.start]].expect("pushed slots have a destination");
            let (name, namelen) = names[k].write(sockaddr_of(dest));
            let (control, controllen) = if r.len() > 1 {
                let c = controls[k].write(Segment::new(self.len[order[r.start]]));
                (std::ptr::from_mut(c).cast(), std::mem::size_of::<Segment>())
            } else {
                (std::ptr::null_mut(), 0)
            };
            // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths);
            // the fields that matter are set below.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            // To the peer a socket is connected to: no address (the kernel keeps the route).
            if Some(dest) != peer {
                h.msg_name = std::ptr::from_mut(name).cast();
                h.msg_namelen = *namelen;
            }
            h.msg_iov = iovs[at[k]].as_mut_ptr();
            h.msg_iovlen = at[k + 1] - at[k];
            h.msg_control = control;
            h.msg_controllen = controllen;
            msgs[k].write(libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            });
        }
        let began = crate::turnaround::start();
        crate::turnaround::sending(began);
        // SAFETY: every pointer in `msgs` (names, iovecs, controls, and the packets the
        // iovecs name inside `self.buf`) points into memory alive and not otherwise
        // borrowed for the call; each iovec covers pushed packets only; the kernel only
        // reads them.
        let sent = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                // The first `n` entries were written above.
                msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
                n as u32,
                libc::MSG_DONTWAIT,
            )
        };
        crate::turnaround::sent(began);
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }
}

/// The control message that asks for segmentation at `seg` bytes (`UDP_SEGMENT`): a
/// `cmsghdr` followed by the size, padded as `CMSG_SPACE` pads it.
#[repr(C)]
#[derive(Clone, Copy)]
struct Segment {
    hdr: libc::cmsghdr,
    size: u16,
    _pad: [u8; 6],
}

impl Segment {
    fn new(seg: usize) -> Self {
        // SAFETY: all-zero bytes are a valid cmsghdr.
        let mut hdr: libc::cmsghdr = unsafe { std::mem::zeroed() };
        hdr.cmsg_level = libc::SOL_UDP;
        hdr.cmsg_type = libc::UDP_SEGMENT;
        hdr.cmsg_len = std::mem::size_of::<libc::cmsghdr>() + std::mem::size_of::<u16>();
        Segment {
            hdr,
            size: seg as u16,
            _pad: [0; 6],
        }
    }
}

/// `a` as the kernel takes it.
fn sockaddr_of(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_storage is large and aligned enough for a sockaddr_in.
            unsafe { (&raw mut s).cast::<libc::sockaddr_in>().write(sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for a sockaddr_in6.
            unsafe { (&raw mut s).cast::<libc::sockaddr_in6>().write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

/// Room for one received message: one RoCE packet, or with GRO up to 64 KiB of them.
const GRO_SLOT: usize = 1 << 16;

/// Room for the control messages of a received message: the segment size (`UDP_GRO`, an
/// int), the TOS byte or traffic class, and the socket's drop count (`SO_RXQ_OVFL`, a u32),
/// 24 bytes each with their headers, with space to spare.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct GroControl([u8; 96]);

/// Room for a batch of received datagrams. With GRO, one message may hold many packets
/// of one peer back to back; the batch lists each packet (a segment) on its own.
pub struct RxBatch {
    buf: Vec<u8>,
    /// Bytes per message slot.
    slot: usize,
    /// Source addresses as the kernel writes them (kept: zeroing them on every call cost
    /// more than the system call when spinning).
    names: Vec<libc::sockaddr_storage>,
    /// Control messages as the kernel writes them (read through the headers).
    _controls: Vec<GroControl>,
    /// The packets of the last receive: where each starts in `buf`, its length, its
    /// source (None: unknown, or refused by the port), and whether its IP header's ECN
    /// field said CE.
    segs: Vec<(usize, usize, Option<SocketAddr>, bool)>,
    /// How many packets the last receive brought.
    pub count: usize,
    /// The `recvmmsg` headers, built once: they point into `buf`, `names` and `controls`
    /// (heap buffers that never move or grow). Building 32 of them on every call cost
    /// more than an empty poll's system call.
    hdrs: Headers,
    /// Messages the last call filled (their headers' lengths were overwritten).
    filled: usize,
    /// The socket's count of datagrams the kernel dropped for want of buffer room, as the
    /// last message that carried it said (`SO_RXQ_OVFL`, where the port asked for it).
    pub overflow: Option<u32>,
    /// The last call found nothing: the next most likely waits for a packet that comes
    /// alone (a ping-pong's), and takes one message with `recvmsg`, which returns 0.3 us
    /// sooner than `recvmmsg` (that goes on to try a second message): 1.14x vs 1.09x
    /// `recvfrom`'s half round trip in a C ping-pong on loopback.
    idle: bool,
}

/// `recvmmsg` headers and the iovecs they point to.
struct Headers {
    msgs: Box<[libc::mmsghdr]>,
    _iovs: Box<[libc::iovec]>,
}

// SAFETY: the raw pointers in `Headers` point only into buffers owned by the same
// `RxBatch` (`buf`, `names`, `controls`, `_iovs`), heap allocations that move with it; they
// are used only in `RxBatch::recv`, which takes `&mut self`.
unsafe impl Send for Headers {}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RxBatch({} datagrams)", self.count)
    }
}

impl Default for RxBatch {
    /// Room for GRO messages.
    fn default() -> Self {
        RxBatch::new(true)
    }
}

impl RxBatch {
    /// Room for [`BATCH`] messages: of up to 64 KiB each with `gro`, else of one packet.
    pub fn new(gro: bool) -> Self {
        let slot = if gro { GRO_SLOT } else { RX_SLOT };
        let mut buf = vec![0; BATCH * slot];
        // SAFETY: all-zero bytes are a valid sockaddr_storage.
        let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; BATCH];
        let mut controls = vec![GroControl([0; 96]); BATCH];
        let base = buf.as_mut_ptr();
        let mut iovs: Box<[libc::iovec]> = (0..BATCH)
            .map(|i| libc::iovec {
                iov_base: base.wrapping_add(i * slot).cast(),
                iov_len: slot,
            })
            .collect();
        let msgs = (0..BATCH)
            .map(|i| libc::mmsghdr {
                msg_hdr: libc::msghdr {
                    // In bounds: `names`, `controls` and `iovs` have BATCH entries.
                    msg_name: names.as_mut_ptr().wrapping_add(i).cast(),
                    msg_namelen: NAME_LEN,
                    msg_iov: iovs.as_mut_ptr().wrapping_add(i),
                    msg_iovlen: 1,
                    msg_control: controls.as_mut_ptr().wrapping_add(i).cast(),
                    msg_controllen: CONTROL_LEN,
                    msg_flags: 0,
                },
                msg_len: 0,
            })
            .collect();
        RxBatch {
            buf,
            slot,
            names,
            _controls: controls,
            segs: Vec::with_capacity(BATCH),
            count: 0,
            hdrs: Headers { msgs, _iovs: iovs },
            filled: 0,
            overflow: None,
            idle: true,
        }
    }

    /// Whether the last receive emptied the socket: it filled fewer messages than it had
    /// room for, so a call now would most likely find nothing (and cost a system call on
    /// the way from a packet to its answer).
    pub fn drained(&self) -> bool {
        self.filled < BATCH
    }

    /// Packet `i` of the last receive.
    pub fn datagram(&self, i: usize) -> &[u8] {
        let (at, len, _, _) = self.segs[i];
        &self.buf[at..at + len]
    }

    /// Whether packet `i` arrived marked CE (congestion experienced).
    pub fn ce(&self, i: usize) -> bool {
        self.segs[i].3
    }

    /// Where packet `i` came from; None if unknown or refused.
    pub fn from(&self, i: usize) -> Option<SocketAddr> {
        self.segs[i].2
    }

    /// The packets of the last receive in runs: each run's packets (their indices) came
    /// from one source with one ECN mark, one after another (a GRO message's segments are
    /// one run, or a part of one). Refused packets are in none. With `together` false,
    /// each packet is a run of its own.
    pub fn runs(
        &self,
        together: bool,
    ) -> impl Iterator<Item = (SocketAddr, bool, std::ops::Range<usize>)> + '_ {
        let mut i = 0;
        std::iter::from_fn(move || {
            while i < self.count {
                let start = i;
                i += 1;
                let Some(src) = self.from(start) else {
                    continue;
                };
                let ce = self.ce(start);
                while together && i < self.count && self.from(i) == Some(src) && self.ce(i) == ce {
                    i += 1;
                }
                return Some((src, ce, start..i));
            }
            None
        })
    }

    /// Marks packet `i` refused (its ICRC failed): it has no source any more.
    pub fn refuse(&mut self, i: usize) {
        self.segs[i].2 = None;
    }

    /// Receives up to [`BATCH`] waiting messages with one `recvmmsg` (one with `recvmsg`
    /// after a call that found nothing), without blocking, and lists their packets.
    /// `Ok(0)`: nothing was waiting.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        self.count = 0;
        self.segs.clear();
        let slot = self.slot;
        // The kernel wrote the name and control lengths of the messages it filled last
        // time: give them their full room again.
        for m in &mut self.hdrs.msgs[..self.filled] {
            m.msg_hdr.msg_namelen = NAME_LEN;
            m.msg_hdr.msg_controllen = CONTROL_LEN;
        }
        self.filled = 0;
        let msgs = &mut self.hdrs.msgs;
        let fd = socket.as_raw_fd();
        let began = crate::turnaround::start();
        let n = if self.idle {
            // SAFETY: the first message's header (its name, control and iovec, and the
            // buffer that names) points into memory owned by `self` (see `Headers`), alive
            // and not otherwise borrowed for the call; the kernel writes at most the
            // lengths given.
            let r = unsafe { libc::recvmsg(fd, &mut msgs[0].msg_hdr, libc::MSG_DONTWAIT) };
            if r < 0 {
                -1
            } else {
                msgs[0].msg_len = r as u32;
                1
            }
        } else {
            // SAFETY: every pointer in `msgs` (names, controls, iovecs and the buffers they
            // name) points into memory owned by `self` (see `Headers`), alive and not
            // otherwise borrowed for the duration of the call; the kernel writes at most
            // the lengths given.
            unsafe {
                libc::recvmmsg(
                    fd,
                    msgs.as_mut_ptr(),
                    BATCH as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            }
        };
        crate::turnaround::received(began, n as isize);
        self.idle = n <= 0;
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(e),
            };
        }
        self.filled = n as usize;
        for (i, m) in self.hdrs.msgs.iter().take(n as usize).enumerate() {
            let len = (m.msg_len as usize).min(slot);
            let from = sockaddr(&self.names[i]);
            // SAFETY: the kernel filled `msg_control` up to `msg_controllen` (in bounds
            // of `self.controls[i]`).
            let (seg, tos, overflow) = unsafe { controls(&m.msg_hdr) };
            self.overflow = overflow.or(self.overflow);
            let seg = seg.unwrap_or(len).max(1);
            let ce = tos.is_some_and(|t| t & 0b11 == 0b11);
            let mut at = 0;
            while at < len {
                let l = seg.min(len - at);
                self.segs.push((i * slot + at, l, from, ce));
                at += l;
            }
            if len == 0 {
                self.segs.push((i * slot, 0, from, ce));
            }
        }
        self.count = self.segs.len();
        Ok(self.count)
    }

    /// How many UDP messages the last receive brought (a message GRO glued is one).
    pub fn messages(&self) -> usize {
        self.filled
    }
}

/// From a received message's control messages: the segment size of a message GRO glued
/// together (`UDP_GRO`), the IP header's TOS or traffic class byte (`IP_TOS`,
/// `IPV6_TCLASS`), whose low two bits are the ECN field, and the socket's drop count
/// (`SO_RXQ_OVFL`).
///
/// # Safety
/// `h`'s control buffer holds what the kernel wrote, `msg_controllen` bytes of it.
unsafe fn controls(h: &libc::msghdr) -> (Option<usize>, Option<u8>, Option<u32>) {
    let (mut seg, mut tos, mut overflow) = (None, None, None);
    // SAFETY: the caller's promise; CMSG_FIRSTHDR and CMSG_NXTHDR stay within it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !c.is_null() {
        // SAFETY: `c` is a control message header within the buffer.
        let cm = unsafe { &*c };
        match (cm.cmsg_level, cm.cmsg_type) {
            (libc::SOL_UDP, libc::UDP_GRO) => {
                // SAFETY: a UDP_GRO message carries an int, possibly unaligned.
                let v = unsafe { libc::CMSG_DATA(c).cast::<libc::c_int>().read_unaligned() };
                seg = usize::try_from(v).ok().filter(|&v| v > 0);
            }
            (libc::IPPROTO_IP, libc::IP_TOS) => {
                // SAFETY: an IP_TOS message carries one byte.
                tos = Some(unsafe { libc::CMSG_DATA(c).read() });
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                // SAFETY: an IPV6_TCLASS message carries an int, possibly unaligned.
                let v = unsafe { libc::CMSG_DATA(c).cast::<libc::c_int>().read_unaligned() };
                tos = u8::try_from(v).ok();
            }
            (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                // SAFETY: an SO_RXQ_OVFL message carries a u32, possibly unaligned.
                overflow = Some(unsafe { libc::CMSG_DATA(c).cast::<u32>().read_unaligned() });
            }
            _ => {}
        }
        // SAFETY: as above.
        c = unsafe { libc::CMSG_NXTHDR(h, c) };
    }
    (seg, tos, overflow)
}

/// The IPv4 or IPv6 address in `s`, if it is one.
fn sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large
            // and aligned enough for.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::from((
                a.sin_addr.s_addr.to_ne_bytes(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::from((
                a.sin6_addr.s6_addr,
                u16::from_be(a.sin6_port),
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_at_each_change_of_source_or_mark_and_skip_refused_packets() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "10.0.0.1:4791".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
        );
        let mut rx = RxBatch::new(false);
        let packets = [
            (Some(a), false),
            (Some(a), false),
            (None, false),
            (Some(a), false),
            (Some(a), true),
            (Some(b), true),
            (Some(b), true),
        ];
        for (i, &(from, ce)) in packets.iter().enumerate() {
            rx.segs.push((i, 1, from, ce));
        }
        rx.count = packets.len();
        let runs: Vec<_> = rx.runs(true).collect();
        assert_eq!(
            runs,
            [
                (a, false, 0..2),
                (a, false, 3..4),
                (a, true, 4..5),
                (b, true, 5..7)
            ]
        );
        let alone: Vec<_> = rx.runs(false).map(|r| r.2).collect();
        assert_eq!(alone, [0..1, 1..2, 3..4, 4..5, 5..6, 6..7]);
    }
}
