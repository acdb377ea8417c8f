//! A connected rsocket: its verbs objects (QP, CQ and completion channel, the three
//! registered buffers), connecting, sending, receiving, shutting down, and waiting on
//! the completion channel and the CM channel together.

use super::flow::{Flow, Link};
use super::maps::IoMaps;
use super::{io, os, partial, RsOptions};
use crate::cm::{CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use crate::lock::lock;
use crate::{
    CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInit, QueuePair,
};
use oxrdma_core::{
    Access, InlineData, QpAttr, QpCap, QpState, QpType, RecvWr, SendData, SendFlags, SendWr,
    SgeList, WcStatus, WorkCompletion, WrOpcode,
};
use oxrdma_wire::rsocket::{ctrl, scale, unscale, ConnData, Op, RsSge, FLAG_IOMAP, FLAG_NET};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use std::io::{ErrorKind, Result};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::MutexGuard;
use std::time::Duration;

/// Receive WRs carry this bit in their `wr_id` (and, on iWARP, their message slot);
/// send WRs carry their message.
const RECV: u64 = 1 << 63;
/// The SEND that carries a WRITE's message on iWARP (`Flow::msg_send`) carries this bit.
const MSG_PART: u64 = 1 << 62;
/// A message's bytes, as rsockets sends them on iWARP: a `uint32_t` in host order.
const MSG_LEN: usize = 4;
/// This machine's byte order, as the connection data's `FLAG_NET` says it.
const NET: bool = cfg!(target_endian = "big");
/// The longest a waiting thread sleeps before it looks again (another thread may have
/// taken the completion event it waited for).
const NAP: Duration = Duration::from_millis(100);
/// How long a waiting call polls before it sleeps (rsockets' `polling_time`): an answer
/// that comes sooner costs no wakeup.
const SPIN: Duration = Duration::from_micros(10);

/// `rrecv` flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvFlags {
    /// Fail with WouldBlock instead of waiting (MSG_DONTWAIT or O_NONBLOCK).
    pub nonblock: bool,
    /// Leave the data to be read again (MSG_PEEK).
    pub peek: bool,
    /// Wait until the buffer is full or the stream ends (MSG_WAITALL).
    pub waitall: bool,
}

/// What `poll` would say of an rsocket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ready {
    /// Data (or the end of the stream) waits (POLLIN).
    pub readable: bool,
    /// A send would go now (POLLOUT).
    pub writable: bool,
    /// The connection is closed (POLLHUP).
    pub hangup: bool,
    /// The connection failed (POLLERR).
    pub error: bool,
}

/// A connected rsocket (or one connecting). `send`/`recv` may be called from different
/// threads at once. On the wire it is rdma-core's rsockets, so the peer may be a C
/// program on librdmacm.
///
/// ```
/// use oxrdma::rsocket::{RListener, RStream};
/// use oxrdma::Context;
/// use std::io::{Read, Write};
/// # fn main() -> std::io::Result<()> {
/// let (s, c) = (Context::open("127.0.1.6".parse().unwrap())?,
///               Context::open("127.0.1.7".parse().unwrap())?);
/// let listener = RListener::bind(&s, "0.0.0.0:47402".parse().unwrap())?;
/// let echo = std::thread::spawn(move || -> std::io::Result<()> {
///     let mut peer = listener.accept()?;
///     let mut b = [0u8; 5];
///     peer.read_exact(&mut b)?;
///     peer.write_all(&b)
/// });
/// let mut stream = RStream::connect(&c, "127.0.0.1:47402".parse().unwrap())?;
/// stream.write_all(b"hello")?;
/// let mut back = [0u8; 5];
/// stream.read_exact(&mut back)?;
/// assert_eq!(&back, b"hello");
/// echo.join().unwrap()
/// # }
/// ```
#[derive(Debug)]
pub struct RStream {
    flow: std::sync::Mutex<Flow>,
    pub(super) maps: std::sync::Mutex<IoMaps>,
    inline: u32,
    pub(super) qp: QueuePair,
    smr: MemoryRegion,
    rmr: MemoryRegion,
    /// The target SGL the peer's credit updates land in, then the iomap table.
    tmr: MemoryRegion,
    /// On iWARP, where messages come as SENDs: a 4-byte slot for each receive.
    mmr: Option<MemoryRegion>,
    pub(super) cq: CompletionQueue,
    comp: CompletionChannel,
    pub(super) pd: ProtectionDomain,
    id: CmId,
    ch: EventChannel,
}

impl RStream {
    /// Connects to the rsocket listener at `dst` from `ctx`'s device with the default
    /// options, as `TcpStream::connect` does: returns once the connection is up.
    pub fn connect(ctx: &Context, dst: SocketAddr) -> Result<RStream> {
        let ch = EventChannel::for_context(ctx).map_err(io)?;
        RStream::connect_with(&ch, ctx, None, dst, &RsOptions::default(), false)
    }

    /// Connects to `dst` (from `src` if given) on `ctx`'s device, the CM's events coming
    /// on `ch`. With `nonblock` it returns once the REQ is out; `finish_connect` (or any
    /// call) completes it.
    pub fn connect_with(
        ch: &EventChannel,
        ctx: &Context,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        o: &RsOptions,
        nonblock: bool,
    ) -> Result<RStream> {
        let id = CmId::new(ch, ctx, PortSpace::Tcp).map_err(io)?;
        id.resolve_addr(src, dst).map_err(io)?;
        wait_local(ch, CmEventType::AddrResolved)?;
        id.resolve_route().map_err(io)?;
        wait_local(ch, CmEventType::RouteResolved)?;
        let s = RStream::build(id, ch.clone(), o)?;
        let f = lock(&s.flow);
        let param = ConnParam {
            private_data: s.conn_data(&f).to_vec(),
            responder_resources: 0,
            // As rsockets: iWARP's setup may use one READ (the ready-to-receive message).
            initiator_depth: u8::from(f.msg_send),
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: 0,
        };
        drop(f);
        s.id.connect(&param).map_err(io)?;
        if !nonblock {
            s.finish_connect(false)?;
        }
        Ok(s)
    }

    /// The passive side: `id` came in a connection request whose connection data is
    /// `peer`; accepts it with this side's.
    pub(super) fn accept(
        id: CmId,
        ch: EventChannel,
        req: &ConnParam,
        peer: &ConnData,
        o: &RsOptions,
    ) -> Result<RStream> {
        let s = RStream::build(id, ch, o)?;
        let mut f = lock(&s.flow);
        s.save(&mut f, peer);
        let param = ConnParam {
            private_data: s.conn_data(&f).to_vec(),
            ..req.clone()
        };
        s.id.accept(&param).map_err(io)?;
        // The QP is ready to send: the RTU only tells the CM.
        f.link = Link::Open;
        drop(f);
        Ok(s)
    }

    fn build(id: CmId, ch: EventChannel, o: &RsOptions) -> Result<RStream> {
        let ctx = id.context().clone();
        let max = ctx.attr().max_qp_wr.clamp(16, 0xfffe);
        let (sq, rq) = (o.sq_size.clamp(16, max), o.rq_size.clamp(16, max));
        let comp = ctx.create_comp_channel().map_err(io)?;
        comp.set_nonblocking(true).map_err(io)?;
        let cq = ctx.create_cq(sq + rq).map_err(io)?;
        let pd = ctx.alloc_pd().map_err(io)?;
        let cap = QpCap {
            max_send_wr: sq,
            max_recv_wr: rq,
            max_send_sge: 2,
            max_recv_sge: 1,
            // Credit updates (16 B) and iomap entries go inline whatever `inline` says.
            max_inline_data: o.inline.max(32),
        };
        let init = QpInit {
            sq_sig_all: true,
            ..QpInit::new(QpType::Rc, cap)
        };
        let qp = pd.create_qp_with(&cq, &cq, init).map_err(io)?;
        id.attach_qp(&qp).map_err(io)?;
        let sbuf = o.sbuf_size.max(2 * super::flow::SNDLOWAT);
        let rbuf = o.rbuf_size.max(2 * super::flow::SNDLOWAT);
        let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let smr = pd
            .register(sbuf as usize, Access::LOCAL_WRITE)
            .map_err(io)?;
        let rmr = pd.register(rbuf as usize, remote).map_err(io)?;
        let iomap = unscale(scale(o.iomap_size));
        let tlen = RsSge::LEN * 2 + super::flow::IOMAP_LEN as usize * iomap as usize;
        let tmr = pd.register(tlen, remote).map_err(io)?;
        let msg_send = ctx.transport() == oxrdma_core::DeviceTransport::Iwarp;
        let mmr = if msg_send {
            let len = rq as usize * MSG_LEN;
            Some(pd.register(len, Access::LOCAL_WRITE).map_err(io)?)
        } else {
            None
        };
        for i in 0..u64::from(rq) {
            post_recv(&qp, mmr.as_ref(), RECV | i)?;
        }
        let mut flow = Flow::new(sq, rq, sbuf, rbuf);
        flow.msg_send = msg_send;
        Ok(RStream {
            flow: std::sync::Mutex::new(flow),
            maps: std::sync::Mutex::new(IoMaps::new(iomap)),
            inline: o.inline,
            qp,
            smr,
            rmr,
            tmr,
            mmr,
            cq,
            comp,
            pd,
            id,
            ch,
        })
    }

    /// This side's connection data (`struct rs_conn_data`).
    fn conn_data(&self, f: &Flow) -> [u8; ConnData::LEN] {
        let iomap = lock(&self.maps).local_size();
        let c = ConnData {
            flags: FLAG_IOMAP | if NET { FLAG_NET } else { 0 },
            credits: f.rq_size as u16,
            target_iomap_size: scale(iomap),
            target_sgl: RsSge {
                addr: self.tmr.addr(),
                key: self.tmr.rkey(),
                length: 2,
            },
            data_buf: RsSge {
                addr: self.rmr.addr(),
                key: self.rmr.rkey(),
                length: f.rbuf_size >> 1,
            },
        };
        let mut b = [0u8; ConnData::LEN];
        // 40 bytes is what `emit` needs.
        let _ = c.emit(&mut b);
        b
    }

    /// Takes in the peer's connection data.
    fn save(&self, f: &mut Flow, c: &ConnData) {
        f.remote_sgl = c.target_sgl;
        f.remote_sgl.length = f.remote_sgl.length.clamp(1, 2);
        f.remote_sge = 1 % f.remote_sgl.length;
        f.swap = (c.flags & FLAG_NET != 0) != NET;
        if c.flags & FLAG_IOMAP != 0 {
            f.remote_iomap = RsSge {
                addr: c.target_sgl.addr + (RsSge::LEN as u64) * u64::from(c.target_sgl.length),
                key: c.target_sgl.key,
                length: unscale(c.target_iomap_size),
            };
        }
        self.set_target(0, &c.data_buf);
        f.sseq_comp = c.credits;
    }

    /// Entry `i` of this side's target SGL: the peer's receive-buffer half data goes to.
    fn target(&self, i: usize) -> RsSge {
        let mut b = [0u8; RsSge::LEN];
        // In the region by construction (two entries); else it reads as zero.
        let _ = self.tmr.read(i * RsSge::LEN, &mut b);
        RsSge::parse_order(&b, NET).unwrap_or_default()
    }

    fn set_target(&self, i: usize, s: &RsSge) {
        let mut b = [0u8; RsSge::LEN];
        let _ = s.emit_order(&mut b, NET);
        let _ = self.tmr.write(i * RsSge::LEN, &b);
    }

    /// Entry `i` of this side's iomap table (what the peer mapped for our `riowrite`).
    pub(super) fn iomap_entry(&self, i: usize) -> (u64, RsSge) {
        let mut b = [0u8; super::flow::IOMAP_LEN as usize];
        let at = RsSge::LEN * 2 + i * b.len();
        // The table's entries are in the region by construction; else it reads as zero.
        let _ = self.tmr.read(at, &mut b);
        let offset = if NET {
            u64::from_be_bytes(b[..8].try_into().unwrap_or_default())
        } else {
            u64::from_le_bytes(b[..8].try_into().unwrap_or_default())
        };
        (offset, RsSge::parse_order(&b[8..], NET).unwrap_or_default())
    }

    pub(super) fn target_room(&self, f: &Flow) -> u32 {
        self.target(f.target_sge).length
    }

    /// Completes a non-blocking connect: Ok once connected, WouldBlock while the CM
    /// works, the failure if it failed.
    pub fn finish_connect(&self, nonblock: bool) -> Result<()> {
        let f = self.wait(nonblock, |f, _| f.link != Link::Connecting)?;
        match f.link {
            Link::Failed(e) => Err(os(e)),
            _ => Ok(()),
        }
    }

    /// Whether a non-blocking connect is still under way.
    pub fn is_connecting(&self) -> bool {
        lock(&self.flow).link == Link::Connecting
    }

    /// Sends `buf`: how many bytes went (all unless the peer's window closed on a
    /// non-blocking call, or the connection failed part way).
    pub fn send(&self, buf: &[u8], nonblock: bool) -> Result<usize> {
        let mut f = self.send_iomaps(self.ready_flow(nonblock)?, nonblock)?;
        // Unlike rsockets, which would post into a dead connection, say it is gone.
        if !f.writable || !f.connected() {
            return Err(os(Errno::CONNRESET));
        }
        let mut sent = 0;
        let mut olen = f.first_chunk();
        while sent < buf.len() {
            if !f.can_send(self.target_room(&f)) {
                drop(f);
                f = match self.send_room(nonblock) {
                    Ok(f) => f,
                    Err(e) => return partial(sent, e),
                };
                continue;
            }
            let room = self.target_room(&f);
            let x = f.chunk(buf.len() - sent, &mut olen, room) as usize;
            self.post_data(&mut f, &buf[sent..sent + x])?;
            sent += x;
        }
        Ok(sent)
    }

    /// Receives into `buf`: 0 at the end of the stream.
    pub fn recv(&self, buf: &mut [u8], flags: RecvFlags) -> Result<usize> {
        let mut got = 0;
        loop {
            let mut f = self.ready_flow(flags.nonblock)?;
            // Less than asked for is here: take in what has arrived since (a reader that
            // peeks until a whole record is there must see it come).
            if f.queued < (buf.len() - got) as u64 {
                self.progress(&mut f);
            }
            if f.rmsg.is_empty() {
                drop(f);
                f = match self.wait(flags.nonblock, |f, _| f.rdata_or_end()) {
                    Ok(f) => f,
                    Err(e) => return partial(got, e),
                };
            }
            let pieces = f.take_data(buf.len() - got, flags.peek);
            for (off, len) in pieces {
                let (off, len) = (off as usize, len as usize);
                // The receive ring's pieces lie in its region (`Flow::take_data`).
                let _ = self.rmr.read(off, &mut buf[got..got + len]);
                got += len;
            }
            self.update_credits(&mut f);
            if flags.peek || got == buf.len() || !flags.waitall || f.rmsg.is_empty() && !f.readable
            {
                return Ok(got);
            }
        }
    }

    /// `shutdown(2)` as `std::net::TcpStream::shutdown` takes it.
    pub fn shutdown_std(&self, how: std::net::Shutdown) -> Result<()> {
        use std::net::Shutdown::{Both, Read, Write};
        self.shutdown(matches!(how, Read | Both), matches!(how, Write | Both))
    }

    /// `shutdown`: stops sending, receiving or both, telling the peer.
    pub fn shutdown(&self, read: bool, write: bool) -> Result<()> {
        let mut f = lock(&self.flow);
        if f.connected() {
            if read {
                f.readable = false;
            }
            if write {
                f.writable = false;
            }
            let what = match (f.readable, f.writable) {
                (false, false) => ctrl::DISCONNECT,
                (true, false) => ctrl::SHUTDOWN,
                // Reading stopped, writing goes on: nothing to tell.
                _ => return Ok(()),
            };
            if !f.ctrl_avail() {
                drop(f);
                f = self.wait(false, |f, _| f.ctrl_avail() || !f.connected())?;
            }
            if f.connected() && f.ctrl_avail() {
                let imm = f.take_ctrl(what);
                self.post_msg(&mut f, imm)?;
            }
        }
        if f.connected() {
            drop(f);
            f = self.wait(false, |f, _| f.all_sends_done())?;
        }
        if f.link == Link::Closed {
            // As librdmacm's shutdown: the QP goes to ERR, flushing the receives.
            let _ = self.qp.modify(&QpAttr {
                qp_state: Some(QpState::Err),
                ..QpAttr::default()
            });
        }
        Ok(())
    }

    /// What poll would report for `want` now (moving the connection on first).
    pub fn ready(&self, want: Ready) -> Ready {
        let mut f = lock(&self.flow);
        self.progress(&mut f);
        self.readiness(&f, want)
    }

    /// The CQ could not be armed (the device failed): the stream fails with the error.
    fn arm_failed(&self, f: &mut Flow, e: crate::Error, want: Ready) -> Ready {
        let e = io(e)
            .raw_os_error()
            .map_or(Errno::IO, Errno::from_raw_os_error);
        self.fail(f, e);
        self.readiness(f, want)
    }

    fn readiness(&self, f: &Flow, want: Ready) -> Ready {
        let mut r = Ready::default();
        match f.link {
            Link::Connecting => return r,
            Link::Failed(_) => {
                r.readable = want.readable;
                r.writable = want.writable;
                r.error = true;
                return r;
            }
            // Hung up once what came before the close is read: a poller that sees
            // POLLHUP with data still queued (rstream does) would stop short of it.
            Link::Closed => r.hangup = f.rmsg.is_empty(),
            Link::Open => {}
        }
        r.readable = want.readable && f.rdata_or_end();
        r.writable = want.writable && f.can_send(self.target_room(f));
        r
    }

    /// Before sleeping on `fds`: arms the CQ, and says what is ready already (then do
    /// not sleep).
    pub fn arm(&self, want: Ready) -> Option<Ready> {
        let mut f = lock(&self.flow);
        self.progress(&mut f);
        let r = self.readiness(&f, want);
        if r != Ready::default() {
            return Some(r);
        }
        if !f.armed {
            if let Err(e) = self.cq.req_notify(&self.comp) {
                return Some(self.arm_failed(&mut f, e, want));
            }
            f.armed = true;
            self.progress(&mut f);
            let r = self.readiness(&f, want);
            if r != Ready::default() {
                return Some(r);
            }
        }
        None
    }

    /// The descriptors to sleep on after `arm`: the completion channel, the CM channel.
    pub fn fds(&self) -> [BorrowedFd<'_>; 2] {
        [self.comp.as_fd(), self.ch.as_fd()]
    }

    /// After sleeping: takes the completion events (the CQ must be armed again).
    pub fn woke(&self) {
        let mut any = false;
        while let Ok(Some(_)) = self.comp.get_event() {
            any = true;
        }
        if any {
            lock(&self.flow).armed = false;
        }
    }

    /// The program will not call in until its descriptors wake it (an async task
    /// pending): the engine thread moves the packets meanwhile.
    #[cfg(feature = "tokio")]
    pub(crate) fn app_leaves(&self) {
        if let Some(cq) = self.cq.engine_cq() {
            cq.ctx.shared().app_leaves();
        }
    }

    /// SO_ERROR: the pending error, cleared.
    pub fn take_error(&self) -> Option<std::io::Error> {
        lock(&self.flow).err.take().map(os)
    }

    /// The CM event channel the connection's events come on.
    pub fn channel(&self) -> &EventChannel {
        &self.ch
    }

    /// This side's address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// The path MTU in bytes (TCP_MAXSEG).
    pub fn mtu(&self) -> u32 {
        self.id.context().active_mtu().bytes() as u32
    }

    /// The flow, connected (or the call fails as librdmacm's would).
    fn ready_flow(&self, nonblock: bool) -> Result<MutexGuard<'_, Flow>> {
        if self.is_connecting() {
            match self.finish_connect(nonblock) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(os(Errno::AGAIN)),
                r => r?,
            }
        }
        Ok(lock(&self.flow))
    }

    /// Waits until a message may go; ECONNRESET if the connection can no longer send.
    pub(super) fn send_room(&self, nonblock: bool) -> Result<MutexGuard<'_, Flow>> {
        let f = self.wait(nonblock, |f, s| {
            f.can_send(s.target_room(f)) || !f.writable || !f.connected()
        })?;
        if !f.writable || !f.connected() {
            return Err(os(Errno::CONNRESET));
        }
        Ok(f)
    }

    /// Moves the connection on until `done` holds: completions, credits, CM events;
    /// sleeping on the descriptors unless `nonblock` (WouldBlock then).
    pub(super) fn wait(
        &self,
        nonblock: bool,
        done: impl Fn(&Flow, &Self) -> bool,
    ) -> Result<MutexGuard<'_, Flow>> {
        let mut f = lock(&self.flow);
        let spin_until = std::time::Instant::now() + SPIN;
        loop {
            self.progress(&mut f);
            if done(&f, self) {
                return Ok(f);
            }
            if nonblock {
                return Err(os(Errno::AGAIN));
            }
            if std::time::Instant::now() < spin_until {
                continue;
            }
            if !f.armed {
                if let Err(e) = self.cq.req_notify(&self.comp) {
                    return Err(io(e));
                }
                f.armed = true;
                continue;
            }
            drop(f);
            let [a, b] = self.fds();
            let mut fds = [
                PollFd::new(&a, PollFlags::IN),
                PollFd::new(&b, PollFlags::IN),
            ];
            let nap = Timespec::try_from(NAP).ok();
            match poll(&mut fds, nap.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(os(e)),
            }
            self.woke();
            f = lock(&self.flow);
        }
    }

    /// Completions, then credits owed, then CM events.
    fn progress(&self, f: &mut Flow) {
        self.update_credits(f);
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        let mut recvs = Vec::new();
        loop {
            wcs.clear();
            match self.cq.poll(&mut wcs, 64) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            for wc in &wcs {
                if wc.wr_id & RECV != 0 {
                    // Flushed receives say nothing.
                    if wc.status != WcStatus::Success {
                        continue;
                    }
                    recvs.push(wc.wr_id);
                    if let Some(imm) = wc.imm {
                        f.on_message(imm);
                    } else if let Some(m) = self.message_in(wc) {
                        f.on_message(m);
                    }
                } else if wc.wr_id & MSG_PART != 0 {
                    f.on_msg_send_done(wc.wr_id as u32, wc.status != WcStatus::Success);
                } else {
                    f.on_send_done(wc.wr_id as u32, wc.status != WcStatus::Success);
                }
            }
        }
        if f.connected() {
            for wr_id in recvs {
                // (Again into the same message slot, on iWARP.)
                let r = post_recv(&self.qp, self.mmr.as_ref(), wr_id);
                if r.is_err() {
                    f.link = Link::Failed(Errno::NOMEM);
                    f.err = Some(Errno::NOMEM);
                    break;
                }
            }
        }
        while let Some(ev) = self.ch.try_event() {
            self.on_cm_event(f, ev);
        }
        self.update_credits(f);
    }

    fn on_cm_event(&self, f: &mut Flow, ev: crate::cm::CmEvent) {
        let connecting = f.link == Link::Connecting;
        match ev.event {
            CmEventType::Established if connecting => {
                match ConnData::parse(&ev.conn.private_data) {
                    Ok(c) => {
                        self.save(f, &c);
                        f.link = Link::Open;
                    }
                    Err(_) => self.fail(f, Errno::NOTSUP),
                }
            }
            CmEventType::Rejected if connecting => self.fail(f, Errno::CONNREFUSED),
            CmEventType::Unreachable | CmEventType::ConnectError if connecting => {
                let e = Errno::from_raw_os_error(ev.status.unsigned_abs() as i32);
                self.fail(f, if ev.status == 0 { Errno::TIMEDOUT } else { e });
            }
            CmEventType::Disconnected => f.close(),
            _ => {}
        }
    }

    fn fail(&self, f: &mut Flow, e: Errno) {
        f.link = Link::Failed(e);
        f.err = Some(e);
        f.readable = false;
        f.writable = false;
    }

    fn update_credits(&self, f: &mut Flow) {
        if !f.should_give_credits() {
            return;
        }
        let c = f.take_credit(self.rmr.addr(), self.rmr.rkey());
        let r = match c.sge {
            Some((sge, at)) => {
                let mut b = [0u8; RsSge::LEN];
                let _ = sge.emit_order(&mut b, NET != f.swap);
                let at = f.remote_sgl.addr + u64::from(at) * RsSge::LEN as u64;
                self.post_write_msg(
                    f,
                    c.imm,
                    SendData::Inline(InlineData::from_slice(&b)),
                    at,
                    f.remote_sgl.key,
                )
            }
            None => self.post_msg(f, c.imm),
        };
        if r.is_err() {
            self.fail(f, Errno::NOMEM);
        }
    }

    /// A message with no data (a credit limit alone, a control message).
    fn post_msg(&self, f: &mut Flow, imm: u32) -> Result<()> {
        if f.msg_send {
            return self.send_msg(imm, u64::from(imm));
        }
        // rsockets leaves the address and key of these unset: the length is 0.
        self.post_write_msg(f, imm, SendData::Inline(InlineData::new()), 0, 0)
    }

    /// `data` written at `addr` with the message `imm`: one WRITE WITH IMMEDIATE, or on
    /// iWARP a WRITE and then a SEND of the message (its completion returns the slot).
    pub(super) fn post_write_msg(
        &self,
        f: &Flow,
        imm: u32,
        data: SendData,
        addr: u64,
        rkey: u32,
    ) -> Result<()> {
        let opcode = if f.msg_send {
            WrOpcode::RdmaWrite
        } else {
            WrOpcode::RdmaWriteWithImm
        };
        let wr = SendWr {
            imm,
            remote_addr: addr,
            rkey,
            flags: SendFlags::SIGNALED,
            ..SendWr::new(u64::from(imm), opcode, data)
        };
        self.qp.post_send(wr).map_err(io)?;
        if f.msg_send {
            let (op, _) = Op::split(imm);
            self.send_msg(imm, u64::from(op.imm(0)) | MSG_PART)?;
        }
        Ok(())
    }

    /// A message as a SEND of its 4 bytes (iWARP).
    fn send_msg(&self, msg: u32, wr_id: u64) -> Result<()> {
        let data = SendData::Inline(InlineData::from_slice(&msg.to_ne_bytes()));
        let wr = SendWr {
            flags: SendFlags::SIGNALED,
            ..SendWr::new(wr_id, WrOpcode::Send, data)
        };
        self.qp.post_send(wr).map_err(io)
    }

    /// The message a receive brought on iWARP: its slot's 4 bytes.
    fn message_in(&self, wc: &WorkCompletion) -> Option<u32> {
        let mmr = self.mmr.as_ref()?;
        let slot = (wc.wr_id & u64::from(u32::MAX)) as usize;
        let mut b = [0u8; MSG_LEN];
        mmr.read(slot * MSG_LEN, &mut b).ok()?;
        (wc.byte_len as usize == MSG_LEN).then_some(u32::from_ne_bytes(b))
    }

    /// `data` (at most the target's room and the free send buffer) as one message into
    /// the peer's current receive half.
    fn post_data(&self, f: &mut Flow, data: &[u8]) -> Result<()> {
        let len = data.len() as u32;
        let mut t = self.target(f.target_sge);
        let (addr, rkey) = (t.addr, t.key);
        // The entry moves on before the write goes, or the peer's next credit update
        // could land first and be overwritten.
        t.addr += u64::from(len);
        t.length -= len;
        self.set_target(f.target_sge, &t);
        if t.length == 0 {
            f.target_sge ^= 1;
        }
        let data = self.stage(f, data, true);
        self.post_write_msg(f, Op::Data.imm(len), data, addr, rkey)
    }

    /// Takes send resources for `data` and says where the WR gets it: inline when small
    /// enough, else copied into the send buffer. `data_msg` counts it against the peer's
    /// credits.
    pub(super) fn stage(&self, f: &mut Flow, data: &[u8], data_msg: bool) -> SendData {
        let len = data.len() as u32;
        let inline = len <= self.inline;
        let pieces = if data_msg {
            f.take_send(len, inline)
        } else {
            f.take_slot(len, inline)
        };
        if inline {
            return SendData::Inline(InlineData::from_slice(data));
        }
        let mut sges = SgeList::new();
        let mut at = 0usize;
        for (off, n) in pieces {
            let (off, n) = (off as usize, n as usize);
            let piece = self.smr.write(off, &data[at..at + n]);
            let sge = piece.and_then(|()| self.smr.sge(off, n));
            sges.push(sge.expect("the send ring's pieces lie inside its region"));
            at += n;
        }
        SendData::Sges(sges)
    }

    pub(super) fn lock_flow(&self) -> MutexGuard<'_, Flow> {
        lock(&self.flow)
    }
}

impl Drop for RStream {
    fn drop(&mut self) {
        let open = lock(&self.flow).connected();
        if open {
            let _ = self.shutdown(true, true);
        }
        let _ = self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Err),
            ..QpAttr::default()
        });
        let _ = self.id.disconnect();
    }
}

/// Posts a receive: no buffer where messages come as immediate data, else (iWARP) the
/// message slot `wr_id` names.
fn post_recv(qp: &QueuePair, mmr: Option<&MemoryRegion>, wr_id: u64) -> Result<()> {
    let mut sges = SgeList::new();
    if let Some(m) = mmr {
        let slot = (wr_id & u64::from(u32::MAX)) as usize;
        sges.push(m.sge(slot * MSG_LEN, MSG_LEN).map_err(io)?);
    }
    qp.post_recv(RecvWr { wr_id, sges }).map_err(io)
}

/// Waits for an address or route resolution of a fresh id.
fn wait_local(ch: &EventChannel, want: CmEventType) -> Result<()> {
    loop {
        let Some(ev) = ch.get_event().map_err(io)? else {
            return Err(os(Errno::AGAIN));
        };
        if ev.event == want {
            return Ok(());
        }
        if matches!(ev.event, CmEventType::AddrError | CmEventType::RouteError) {
            let e = Errno::from_raw_os_error(ev.status.unsigned_abs() as i32);
            return Err(os(if ev.status == 0 {
                Errno::HOSTUNREACH
            } else {
                e
            }));
        }
    }
}

impl std::io::Read for &RStream {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.recv(buf, RecvFlags::default())
    }
}

impl std::io::Write for &RStream {
    fn write(&mut self, buf: &[u8]) -> Result<usize> {
        self.send(buf, false)
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

/// As `&RStream` reads: a stream owned by one reader need not be borrowed to be read.
impl std::io::Read for RStream {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        (&*self).read(buf)
    }
}

impl std::io::Write for RStream {
    fn write(&mut self, buf: &[u8]) -> Result<usize> {
        (&*self).write(buf)
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}
