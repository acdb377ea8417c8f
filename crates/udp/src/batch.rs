//! Batched datagram I/O: up to [`BATCH`] packets per system call (`sendmmsg`, `recvmmsg`),
//! so a burst of MTU packets or a train of small WRITEs costs one kernel crossing, not one
//! per packet.

use oxrdma_core::MAX_PACKET;
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Packets per system call.
pub const BATCH: usize = 32;

/// Room for what may arrive (anything longer is truncated and fails its ICRC).
const RX_SLOT: usize = MAX_PACKET + 64;

/// Packets waiting to be sent: slot `i` holds `len[i]` bytes for `dest[i]`.
#[derive(Debug)]
pub struct TxBatch {
    buf: Vec<u8>,
    pub len: [usize; BATCH],
    pub dest: [Option<SocketAddr>; BATCH],
    pub count: usize,
}

impl Default for TxBatch {
    fn default() -> Self {
        TxBatch {
            buf: vec![0; BATCH * MAX_PACKET],
            len: [0; BATCH],
            dest: [None; BATCH],
            count: 0,
        }
    }
}

impl TxBatch {
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }
    /// The next free slot, whole (the caller writes a packet into it and then `push`es).
    pub fn next_slot(&mut self) -> &mut [u8] {
        let i = self.count;
        &mut self.buf[i * MAX_PACKET..(i + 1) * MAX_PACKET]
    }
    /// Takes the packet just written into the next slot.
    pub fn push(&mut self, dest: SocketAddr, len: usize) {
        let i = self.count;
        (self.len[i], self.dest[i]) = (len, Some(dest));
        self.count += 1;
    }
    /// Packet `i`, mutable (the port fills in its ICRC).
    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.buf[i * MAX_PACKET..i * MAX_PACKET + self.len[i]]
    }

    /// Sends packets `from..count` with one `sendmmsg`; returns how many the kernel took
    /// (at least one unless it returned an error).
    pub fn send(&self, socket: &UdpSocket, from: usize) -> io::Result<usize> {
        use rustix::net::{sendmmsg, MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
        let n = self.count - from;
        let addrs: Vec<SocketAddrAny> = (from..self.count)
            .map(|i| SocketAddrAny::from(self.dest[i].expect("pushed slots have a destination")))
            .collect();
        let iovs: Vec<[io::IoSlice<'_>; 1]> = (from..self.count)
            .map(|i| {
                [io::IoSlice::new(
                    &self.buf[i * MAX_PACKET..i * MAX_PACKET + self.len[i]],
                )]
            })
            .collect();
        let mut controls: Vec<SendAncillaryBuffer<'_, '_, '_>> =
            (0..n).map(|_| SendAncillaryBuffer::default()).collect();
        let mut msgs: Vec<MMsgHdr<'_>> = addrs
            .iter()
            .zip(&iovs)
            .zip(controls.iter_mut())
            .map(|((a, iov), c)| MMsgHdr::new_with_addr(a, iov, c))
            .collect();
        Ok(sendmmsg(socket, &mut msgs, SendFlags::DONTWAIT)?)
    }
}

/// Room for a batch of received datagrams.
pub struct RxBatch {
    buf: Vec<u8>,
    /// Source addresses as the kernel writes them (kept: zeroing them on every call cost
    /// more than the system call when spinning).
    names: Vec<libc::sockaddr_storage>,
    pub len: [usize; BATCH],
    pub from: [Option<SocketAddr>; BATCH],
    pub count: usize,
}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RxBatch({} datagrams)", self.count)
    }
}

impl Default for RxBatch {
    fn default() -> Self {
        RxBatch {
            buf: vec![0; BATCH * RX_SLOT],
            // SAFETY: all-zero bytes are a valid sockaddr_storage.
            names: vec![unsafe { std::mem::zeroed() }; BATCH],
            len: [0; BATCH],
            from: [None; BATCH],
            count: 0,
        }
    }
}

impl RxBatch {
    /// Datagram `i` of the last receive.
    pub fn datagram(&self, i: usize) -> &[u8] {
        &self.buf[i * RX_SLOT..i * RX_SLOT + self.len[i]]
    }

    /// Receives up to [`BATCH`] waiting datagrams with one `recvmmsg`, without blocking.
    /// `Ok(0)`: nothing was waiting.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        self.count = 0;
        let name_len = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        // One base pointer for all slots (the buffer holds BATCH slots of RX_SLOT bytes).
        let base = self.buf.as_mut_ptr();
        let mut iovs: [libc::iovec; BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: base.wrapping_add(i * RX_SLOT).cast(),
            iov_len: RX_SLOT,
        });
        let names = self.names.as_mut_ptr();
        let mut msgs: [libc::mmsghdr; BATCH] = std::array::from_fn(|i| libc::mmsghdr {
            msg_hdr: libc::msghdr {
                // In bounds: `names` has BATCH entries.
                msg_name: names.wrapping_add(i).cast(),
                msg_namelen: name_len,
                msg_iov: std::ptr::null_mut(),
                msg_iovlen: 1,
                msg_control: std::ptr::null_mut(),
                msg_controllen: 0,
                msg_flags: 0,
            },
            msg_len: 0,
        });
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
        }
        // SAFETY: every pointer in `msgs` (names, iovecs and the buffers they name) points
        // into memory owned by this function, `self.names` or `self.buf`, alive and not
        // otherwise borrowed for the duration of the call; the kernel writes at most the
        // lengths given.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for (i, m) in msgs.iter().take(n).enumerate() {
            self.len[i] = (m.msg_len as usize).min(RX_SLOT);
            self.from[i] = sockaddr(&self.names[i]);
        }
        self.count = n;
        Ok(n)
    }
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
