//! The established connections of a device's iWARP QPs, driven without blocking. Each
//! pass visits the streams with something to do (a socket epoll calls ready, a QP the
//! engine says took work or moved, a nudge due, bytes the QP has not taken yet), never the
//! idle ones: it reads what the socket has and hands it to its QP, then writes what the QP
//! sends until the socket's buffer is full (the rest waits, and the socket is watched for
//! room).
//! A stream the peer closes, or that fails, ends its QP; a QP that ended (a TERMINATE, or
//! ERR) has its stream closed once its last bytes are written, as iWARP ends connections.

use oxrdma_core::{Engine, QpState};
use rustix::event::epoll;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// Bytes read from one socket in one pass, at most (others get their turn).
const READ_BUDGET: usize = 1 << 20;
/// Bytes taken from a QP at a time for its socket.
const WRITE_BATCH: usize = 256 << 10;
/// How long a detached stream's last bytes may take to leave.
const LINGER: Duration = Duration::from_secs(5);

/// One QP's connection.
#[derive(Debug)]
struct Conn {
    sock: TcpStream,
    /// Read and not yet taken by the QP (it takes whole FPDUs).
    unread: Vec<u8>,
    /// Given by the QP, written from `sent` on.
    unsent: Vec<u8>,
    sent: usize,
    /// In the epoll set with these interests (None: out of it, the stream over).
    watching: Option<epoll::EventFlags>,
    /// The stream is over: its QP was told, and nothing more is read or written.
    ended: bool,
    /// When it last moved bytes, and whether it is among `Streams::hot`.
    last_moved: Instant,
    hot: bool,
    /// When its QP, an initiator not yet heard from, sends its RTR again
    /// (`Engine::iwarp_nudge`), and how many times more.
    nudge: Option<(Instant, u32)>,
}

/// The first nudge comes this long after the stream is attached, each next one ten times
/// later (5 ms, 50 ms, 500 ms): the race it covers in siw lasts microseconds.
const NUDGE_FIRST: Duration = Duration::from_millis(5);
const NUDGES: u32 = 3;

/// The streams of a device's iWARP QPs, by QPN.
#[derive(Debug)]
pub struct Streams {
    epoll: OwnedFd,
    conns: BTreeMap<u32, Conn>,
    scratch: Box<[u8]>,
    /// QPs whose stream ended since [`Streams::take_ended`] last looked.
    ended: Vec<u32>,
    /// Streams the next pass visits whatever epoll and the engine say: bytes read that
    /// the QP has not taken, a stream just attached.
    again: Vec<u32>,
    /// The streams' nudges to come, by when (a pass visits those due).
    nudges: BTreeSet<(Instant, u32)>,
    /// Streams that moved bytes in the last `HOT_FOR`: a pass reads them at once, as a
    /// busy-polling NIC would, rather than ask epoll first (a system call more for each
    /// message of a ping-pong); epoll finds the others, asked every `EPOLL_EVERY` while
    /// some are hot, every pass when none is, and never when all are.
    hot: Vec<u32>,
    next_epoll: Instant,
    /// A pass's list of streams to visit, and of those the engine touched (kept to spare
    /// allocations).
    visit: Vec<u32>,
    touched: Vec<u32>,
}

/// Sockets epoll reports in one pass, at most (the rest, still ready, in the next).
const EVENTS_PER_PASS: usize = 64;
/// How long a stream stays hot after it last moved bytes.
const HOT_FOR: Duration = Duration::from_millis(1);
/// How often epoll is asked while some streams are hot: what a stream coming out of
/// idleness may wait, at most, beside busy ones.
const EPOLL_EVERY: Duration = Duration::from_micros(20);

impl Streams {
    /// No streams yet.
    pub fn new() -> io::Result<Streams> {
        Ok(Streams {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            conns: BTreeMap::new(),
            scratch: vec![0; 64 << 10].into_boxed_slice(),
            ended: Vec::new(),
            again: Vec::new(),
            nudges: BTreeSet::new(),
            hot: Vec::new(),
            next_epoll: Instant::now(),
            visit: Vec::new(),
            touched: Vec::new(),
        })
    }

    /// Drives QP `qpn` over `sock` from now on: its MPA exchange is done and the QP knows
    /// it (`Engine::iwarp_established`); `early`, read past the peer's MPA frame, is its
    /// first input.
    pub fn attach(&mut self, qpn: u32, sock: TcpStream, early: &[u8]) -> io::Result<()> {
        if self.conns.contains_key(&qpn) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the QP has a stream already",
            ));
        }
        sock.set_nonblocking(true)?;
        let first_nudge = Instant::now() + NUDGE_FIRST;
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        epoll::add(
            &self.epoll,
            &sock,
            epoll::EventData::new_u64(qpn.into()),
            flags,
        )?;
        self.conns.insert(
            qpn,
            Conn {
                sock,
                unread: early.to_vec(),
                unsent: Vec::new(),
                sent: 0,
                watching: Some(flags),
                ended: false,
                nudge: Some((first_nudge, NUDGES)),
                last_moved: Instant::now(),
                hot: false,
            },
        );
        self.again.push(qpn);
        self.nudges.insert((first_nudge, qpn));
        Ok(())
    }

    /// Stops driving `qpn` (its QP is destroyed) and closes its stream gently
    /// (`close_gently`): a program that destroys its QP, or exits, right after its last
    /// WRITE completed must not cut that WRITE short on the wire.
    pub fn detach(&mut self, qpn: u32) {
        self.again.retain(|&q| q != qpn);
        self.hot.retain(|&q| q != qpn);
        if let Some(c) = self.conns.remove(&qpn) {
            if let Some((at, _)) = c.nudge {
                self.nudges.remove(&(at, qpn));
            }
            if c.watching.is_some() {
                let _ = epoll::delete(&self.epoll, &c.sock);
            }
            close_gently(c);
        }
    }

    /// How many streams are attached.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The epoll set over the sockets: readable when a stream has bytes, or room for
    /// bytes that wait. What a driver's thread sleeps on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Sleeps until a stream has something or `timeout` passes; whether one has.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut events = Vec::with_capacity(8);
        let ts = rustix::event::Timespec::try_from(timeout).unwrap_or(rustix::event::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        loop {
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&ts),
            ) {
                Ok(n) => return Ok(n > 0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// One pass over the streams with something to do: reads and hands to the QPs,
    /// writes what they send. Returns the bytes moved either way.
    pub fn poll(&mut self, engine: &mut Engine) -> usize {
        let now = Instant::now();
        let mut visit = std::mem::take(&mut self.visit);
        visit.clear();
        self.touched.clear();
        engine.take_iwarp_touched(&mut self.touched);
        self.touched.sort_unstable();
        visit.extend_from_slice(&self.touched);
        visit.append(&mut self.again);
        while let Some(&(at, qpn)) = self.nudges.first().filter(|n| n.0 <= now) {
            self.nudges.remove(&(at, qpn));
            visit.push(qpn);
        }
        // (With every stream hot, epoll has nothing to add.)
        let cold = self.hot.len() < self.conns.len();
        if self.hot.is_empty() || (cold && now >= self.next_epoll) {
            self.next_epoll = now + EPOLL_EVERY;
            let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); EVENTS_PER_PASS];
            let at_once = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            if let Ok((ready, _)) = epoll::wait(&self.epoll, &mut events, Some(&at_once)) {
                visit.extend(ready.iter().map(|e| e.data.u64() as u32));
            }
        }
        let mut moved = 0;
        // The hot streams, then the others named (each once; one that turns hot joins).
        let mut i = 0;
        while i < self.hot.len() {
            let (n, hot) = self.visit(self.hot[i], engine, now);
            moved += n;
            if hot {
                i += 1;
            } else {
                self.hot.swap_remove(i);
            }
        }
        if visit.len() > 1 {
            visit.sort_unstable();
            visit.dedup();
        }
        for &qpn in &visit {
            if self.conns.get(&qpn).is_none_or(|c| c.hot) {
                continue;
            }
            let (n, hot) = self.visit(qpn, engine, now);
            moved += n;
            if hot {
                self.hot.push(qpn);
            }
        }
        self.visit = visit;
        moved
    }

    /// Drives stream `qpn` once; the bytes moved, and whether it is hot after.
    fn visit(&mut self, qpn: u32, engine: &mut Engine, now: Instant) -> (usize, bool) {
        let Some(c) = self.conns.get_mut(&qpn).filter(|c| !c.ended) else {
            return (0, false);
        };
        let nudge = c.nudge.map(|n| n.0);
        let touched = self.touched.binary_search(&qpn).is_ok();
        let n = drive(qpn, c, engine, &mut self.scratch, touched);
        rewatch(&self.epoll, qpn, c);
        if n > 0 {
            c.last_moved = now;
        }
        c.hot = !c.ended && now.duration_since(c.last_moved) <= HOT_FOR;
        if c.ended {
            self.ended.push(qpn);
        } else if !c.unread.is_empty() {
            self.again.push(qpn);
        }
        // The nudge's place in the schedule, as the visit left it.
        match (nudge, c.nudge.map(|n| n.0)) {
            (was, now) if was == now => {}
            (was, now) => {
                if let Some(at) = was {
                    self.nudges.remove(&(at, qpn));
                }
                if let Some(at) = now {
                    self.nudges.insert((at, qpn));
                }
            }
        }
        (n, c.hot)
    }

    /// The QPs whose stream ended (the peer closed it or it failed, or the QP ended and
    /// its last bytes went) since the last call: what the RDMA CM reports as
    /// `DISCONNECTED`. A stream detached before it ended is not among them.
    pub fn take_ended(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.ended)
    }
}

/// Closes a stream without losing what it carries, waiting up to `LINGER` in all. What the
/// QP handed out (its WRs completed with it) and the socket had no room for yet is written
/// first, then the FIN, as a TCP socket's close sends what was written to it. Then the
/// peer's bytes are read away until it has acknowledged everything (the FIN too), or closed
/// its side: a socket closed with unread bytes answers with a reset, and a reset throws
/// away what is still in its send buffer (siw's rstream client lost the last bytes of our
/// server's last WRITE so, and waited for ever).
fn close_gently(c: Conn) {
    let deadline = Instant::now() + LINGER;
    let sock = c.sock;
    if c.sent < c.unsent.len() {
        let _ = sock.set_nonblocking(false);
        let _ = sock.set_write_timeout(Some(LINGER));
        if (&sock).write_all(&c.unsent[c.sent..]).is_err() {
            return;
        }
    }
    let _ = sock.shutdown(Shutdown::Write);
    let _ = sock.set_nonblocking(true);
    let mut scratch = [0u8; 4096];
    loop {
        loop {
            match (&sock).read(&mut scratch) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
        if unacknowledged(&sock) == 0 || Instant::now() >= deadline {
            return;
        }
        // An acknowledgement wakes nobody: look again in a millisecond, or when bytes come.
        let mut fds = [rustix::event::PollFd::new(
            &sock,
            rustix::event::PollFlags::IN,
        )];
        let ms = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        let _ = rustix::event::poll(&mut fds, Some(&ms));
    }
}

/// Bytes sent on `sock` and not acknowledged yet, its FIN counted (`SIOCOUTQ`); 0 when the
/// kernel cannot say.
fn unacknowledged(sock: &TcpStream) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ's number on Linux) writes one c_int through the pointer,
    // which points at the live local `n`.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if r == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

/// Writes, reads and receives, and writes again for one stream; the bytes moved. Writing
/// first sends what was posted since the last pass without waiting for a read; writing
/// again sends at once what the bytes read called for (READ responses, a TERMINATE).
fn drive(qpn: u32, c: &mut Conn, engine: &mut Engine, scratch: &mut [u8], touched: bool) -> usize {
    // Only a QP the engine touched (work posted, a move), a nudge, or bytes that wait
    // for room can have something to send before this pass reads: a hot stream's
    // visits with nothing new cost its read alone.
    let write_first = nudge(qpn, c, engine) || touched || c.sent < c.unsent.len();
    let mut moved = 0;
    if write_first {
        match write_out(qpn, c, engine) {
            Ok(n) => moved += n,
            Err(()) => return end(qpn, c, engine, 0),
        }
    }
    let (read, eof) = read_in(qpn, c, engine, scratch);
    moved += read;
    if eof {
        return end(qpn, c, engine, moved);
    }
    if read > 0 {
        match write_out(qpn, c, engine) {
            Ok(n) => moved += n,
            Err(()) => return end(qpn, c, engine, moved),
        }
    }
    // A QP that ended closes its stream once its last bytes (a TERMINATE) are out. (It
    // ends by a move, which touches it, or by what it read.)
    let looked = write_first || read > 0;
    let over = looked && !matches!(engine.qp_state(qpn), Ok(QpState::Rts));
    if over && c.sent == c.unsent.len() {
        let _ = c.sock.shutdown(Shutdown::Write);
        c.ended = true;
    }
    moved
}

/// Asks the QP to send its RTR again when a nudge is due (until it has heard its peer);
/// whether one was due.
fn nudge(qpn: u32, c: &mut Conn, engine: &mut Engine) -> bool {
    let Some((at, left)) = c.nudge else {
        return false;
    };
    if Instant::now() < at {
        return false;
    }
    let again = engine.iwarp_nudge(qpn);
    c.nudge = (again && left > 1).then(|| {
        let step = NUDGE_FIRST * 10u32.pow(NUDGES - left + 1);
        (Instant::now() + step, left - 1)
    });
    true
}

/// The stream ended (EOF, or an error either way): its QP is told.
fn end(qpn: u32, c: &mut Conn, engine: &mut Engine, moved: usize) -> usize {
    let _ = engine.iwarp_stream_closed(qpn);
    c.ended = true;
    moved
}

/// Reads what the socket has (up to a budget) and hands it to the QP; the bytes read,
/// and whether the stream ended.
fn read_in(qpn: u32, c: &mut Conn, engine: &mut Engine, scratch: &mut [u8]) -> (usize, bool) {
    let (mut moved, mut eof) = (0, false);
    while c.unread.len() < READ_BUDGET {
        match c.sock.read(scratch) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => {
                c.unread.extend_from_slice(&scratch[..n]);
                moved += n;
                // Less than asked for: the socket is empty now (one system call saved
                // for each message of a ping-pong; the next pass reads again).
                if n < scratch.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                eof = true;
                break;
            }
        }
    }
    if !c.unread.is_empty() {
        // A QP that cannot take bytes (gone, or not set up) has nothing to give them to.
        let took = engine
            .iwarp_receive(qpn, &c.unread)
            .unwrap_or(c.unread.len());
        c.unread.drain(..took);
    }
    (moved, eof)
}

/// Writes what the QP sends until the socket is full or nothing is left; the bytes
/// written, or Err if the socket failed.
fn write_out(qpn: u32, c: &mut Conn, engine: &mut Engine) -> Result<usize, ()> {
    let mut moved = 0;
    loop {
        if c.sent == c.unsent.len() {
            c.unsent.clear();
            c.sent = 0;
            if engine
                .iwarp_transmit(qpn, &mut c.unsent, WRITE_BATCH)
                .is_err()
                || c.unsent.is_empty()
            {
                return Ok(moved);
            }
        }
        match c.sock.write(&c.unsent[c.sent..]) {
            Ok(n) => {
                c.sent += n;
                moved += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(moved),
            Err(_) => return Err(()),
        }
    }
}

/// Watches a stream for what it waits for now: bytes to read, and room to write if bytes
/// wait; nothing once it is over (a closed socket would wake the thread forever).
fn rewatch(ep: &OwnedFd, qpn: u32, c: &mut Conn) {
    let want = if c.ended {
        None
    } else if c.sent < c.unsent.len() {
        Some(epoll::EventFlags::IN | epoll::EventFlags::RDHUP | epoll::EventFlags::OUT)
    } else {
        Some(epoll::EventFlags::IN | epoll::EventFlags::RDHUP)
    };
    if want == c.watching {
        return;
    }
    let done = match (c.watching, want) {
        (Some(_), None) => epoll::delete(ep, &c.sock),
        (_, Some(flags)) => {
            let data = epoll::EventData::new_u64(qpn.into());
            if c.watching.is_some() {
                epoll::modify(ep, &c.sock, data, flags)
            } else {
                epoll::add(ep, &c.sock, data, flags)
            }
        }
        (None, None) => Ok(()),
    };
    if done.is_ok() {
        c.watching = want;
    }
}
