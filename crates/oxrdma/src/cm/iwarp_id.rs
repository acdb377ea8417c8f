//! The RDMA CM's ids on an iWARP device (`Context::open_iwarp`): a connection is a TCP
//! connection and MPA's exchange on it (RFC 5044 with RFC 6581), as Linux's iw_cm makes
//! them for siw, not the IB CM's MADs. The id's port is the TCP port and its private data
//! is MPA's, unchanged (no CMA header). Both sides see `Established` (no
//! `ConnectResponse`); a refusal is `Rejected` with -ECONNREFUSED (also a port nobody
//! listens on), no answer `Unreachable` with -ETIMEDOUT, anything else `ConnectError`;
//! `Disconnected` comes on each side once the connection's stream ends.
//!
//! The id's life is the CM's one machine (`machine.rs`), as an engine id's: each call asks
//! it for a plan and what happens to the connection is an event the application takes
//! through it. Only the wire differs: the REQ is TCP's connect and MPA's request, the REP
//! MPA's reply, the RTU nothing (the QP's RTR rides on its stream), the DREQ the stream's
//! end. TCP's connect and MPA's request wait on the network, so an id's connect, and each
//! listener's accepting, runs on a thread of its own that reports on the id's channel.

use super::backlog::{Backlog, Slot};
use super::channel::EngineChannel;
use super::incoming::{empty_conn, plain};
use super::machine::{self, Call, Event, Phase, Plan, QpStep};
use super::routes::StreamEnded;
use super::state::{ChannelInner, OwnEvent, Raw, NEXT_KEY};
use super::steps::{QpMover, MAX_DEPTH};
use super::turns::{self, Turns};
use super::{CmEvent, CmEventType, CmId, CmIdKey, ConnParam, PortSpace};
use crate::context::Context;
use crate::engine_context::EngineContext;
use crate::error::{Error, Result};
use crate::iwarp::{attach_stream, init_attr, setup_config, setup_error, SETUP_TIMEOUT};
use crate::lock::lock;
use oxrdma_core::{Gid, QpAttr, QpState, QpType};
use oxrdma_tcp::{mpa, Established, MpaError, Request};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

/// `-ECONNREFUSED`: how Linux's RDMA CM reports an iWARP refusal.
const ECONNREFUSED: i32 = -111;
/// The depth a caller's [`MAX_DEPTH`] stands for (the engine's READ depth).
const DEVICE_DEPTH: u16 = 16;

/// An RDMA CM id of an iWARP device.
#[derive(Debug, Clone)]
pub(crate) struct IwarpId {
    inner: Arc<IwInner>,
    /// The program's hold on the id, shared by its clones (see [`Held`]).
    _held: Arc<Held>,
}

/// The program's hold on an id: when its last clone goes (`rdma_destroy_id`), a listener
/// stops listening at once. The id itself may live a moment longer, held by a thread of
/// its own (a request's, right after it queued its request): its port, still listening,
/// refused perftest's next listener on it (`-R` binds the same port again at once) with
/// EADDRINUSE, 2 runs in 15.
#[derive(Debug)]
struct Held(Arc<IwInner>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.stop_listening();
    }
}

#[derive(Debug)]
pub(crate) struct IwInner {
    key: u64,
    ctx: Context,
    engine: EngineContext,
    channel: Mutex<Arc<ChannelInner>>,
    ps: PortSpace,
    st: Mutex<IwState>,
}

#[derive(Debug, Default)]
struct IwState {
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    qpn: Option<u32>,
    mover: Option<Arc<dyn QpMover>>,
    /// The bound port's socket: it holds the port, and `listen` takes connections on it.
    port: Option<Arc<TcpListener>>,
    phase: Phase,
    /// Passive: the peer's request, until it is accepted or rejected, and its place in
    /// its listener's backlog.
    request: Option<(Box<Request>, Slot)>,
}

/// What befell an iWARP id, waiting in its channel until the application takes it
/// (`Raw::Own`); the machine's plan for it is carried out then.
#[derive(Debug)]
struct Happened {
    id: Weak<IwInner>,
    /// The id's key (known also once the id is gone).
    key: u64,
    what: What,
}

#[derive(Debug)]
enum What {
    /// Resolution: an event of the id's own, no connection.
    Local(CmEventType),
    /// A peer's request for this listener, held by a new id.
    Request(Arc<IwInner>, ConnParam),
    /// MPA's exchange is done and the QP has its stream: the peer's terms.
    Up(ConnParam),
    /// The connection did not come up, with the peer's private data if it refused.
    Failed(Event, Vec<u8>),
    /// The connection's stream ended.
    Ended,
}

impl IwarpId {
    /// `rdma_create_id` on an iWARP device: RC connections only, as iWARP defines.
    pub fn create(
        channel: &EngineChannel,
        ctx: &Context,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Result<IwarpId> {
        if qp_type != QpType::Rc || ps == PortSpace::Udp {
            return Err(Error::Unsupported(
                "iWARP connects RC QPs only (no UD or UC, no RDMA_PS_UDP)",
            ));
        }
        let engine = ctx.engine("the RDMA CM")?.clone();
        Ok(IwarpId::held(Arc::new(IwInner {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            engine,
            channel: Mutex::new(channel.inner.clone()),
            ps,
            st: Mutex::default(),
        })))
    }

    /// The program's id for `inner` (once for each id: the hold is the program's).
    fn held(inner: Arc<IwInner>) -> IwarpId {
        IwarpId {
            _held: Arc::new(Held(inner.clone())),
            inner,
        }
    }

    pub fn key(&self) -> CmIdKey {
        CmIdKey(self.inner.key)
    }
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }
    pub fn local_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.st).src
    }
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.st).dst
    }
    pub fn peer_gid(&self) -> Option<Gid> {
        self.peer_addr().map(|a| Gid::from(a.ip()))
    }
    pub fn qp_num(&self) -> Option<u32> {
        lock(&self.inner.st).qpn
    }

    /// `rdma_bind_addr`: binds the TCP port now (0: the kernel picks one), as the kernel's
    /// iWARP CM does, so a port in use is refused here.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::Bind)?;
        if !super::route::is_local(addr.ip()) {
            return Err(Error::Io(std::io::Error::from_raw_os_error(
                libc::EADDRNOTAVAIL,
            )));
        }
        let port = TcpListener::bind(addr)?;
        st.src = Some(port.local_addr()?);
        st.port = Some(Arc::new(port));
        st.phase = plan.next;
        Ok(())
    }

    /// `rdma_listen`: peers' requests come as `ConnectRequest` events, each with a new id
    /// holding the peer's private data and its connection, to accept or reject; at most
    /// `backlog` unanswered (`backlog.rs`: past it, connections wait in the kernel's queue).
    pub fn listen(&self, backlog: usize) -> Result<()> {
        if matches!(lock(&self.inner.st).phase, Phase::Idle) {
            self.bind_addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
        }
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::Listen)?;
        let port = st.port.clone().expect("a bound id holds its port");
        let me = Arc::downgrade(&self.inner);
        let backlog = Backlog::new(backlog);
        std::thread::Builder::new()
            .name("oxrdma-iwarp-listen".into())
            .spawn(move || take_requests(&port, &me, &backlog, &Arc::default()))?;
        st.phase = plan.next;
        Ok(())
    }

    /// `rdma_resolve_addr`: the device's own address is the source (this id is on it);
    /// whether the peer answers shows at `connect`.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::ResolveAddr)?;
        // The connection comes from the device's address unless one was named.
        let named = st.src.or(src).filter(|s| !s.ip().is_unspecified());
        let port = st.src.map_or(0, |s| s.port());
        let ip = named.map_or(self.inner.ctx.gid().ip(), |s| s.ip());
        st.src = Some(SocketAddr::new(ip, port));
        st.dst = Some(dst);
        st.phase = plan.next;
        self.inner.push(What::Local(CmEventType::AddrResolved));
        Ok(())
    }

    /// `rdma_resolve_route`: nothing to find over TCP; `RouteResolved` follows.
    pub fn resolve_route(&self) -> Result<()> {
        let mut st = lock(&self.inner.st);
        st.phase = plan(&st, Call::ResolveRoute)?.next;
        self.inner.push(What::Local(CmEventType::RouteResolved));
        Ok(())
    }

    /// Makes QP `qpn` this id's and moves it to INIT with remote READ and WRITE (through
    /// `mover` if given, else the engine); the connection takes it to RTS.
    pub fn attach(&self, qpn: u32, mover: Option<Arc<dyn QpMover>>) -> Result<()> {
        let mut st = lock(&self.inner.st);
        (st.qpn, st.mover) = (Some(qpn), mover);
        self.inner.move_qp(&st, &init_attr())
    }

    pub fn detach_qp(&self) {
        let mut st = lock(&self.inner.st);
        (st.qpn, st.mover) = (None, None);
    }

    /// `rdma_init_qp_attr`, as Linux's iWARP CM gives it: INIT with remote access; RTR
    /// and RTS are the connection's to make, so nothing is asked for them.
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        match state {
            QpState::Init => Ok(init_attr()),
            QpState::Rtr | QpState::Rts => Ok(QpAttr::default()),
            _ => Err(Error::CmState("rdma_init_qp_attr gives INIT, RTR or RTS")),
        }
    }

    /// `rdma_migrate_id`: later events go to `to`, with those still waiting.
    pub fn migrate(&self, to: &EngineChannel) {
        let mut cur = lock(&self.inner.channel);
        let key = CmIdKey(self.inner.key);
        let moving = cur
            .queue
            .take_where(|r| matches!(r, Raw::Own(e) if e.is_for(key.0)));
        for r in moving {
            to.inner.queue.push(r);
        }
        *cur = to.inner.clone();
    }

    /// `rdma_connect`: TCP to the resolved address, MPA's request with `param`'s private
    /// data and depths; the attached QP is in RTS when `Established` comes.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::Connect)?;
        let (Some(src), Some(dst), Some(qpn)) = (st.src, st.dst, st.qpn) else {
            return Err(Error::CmState(
                "an iWARP connection needs a QP: attach one first (rdma_create_qp)",
            ));
        };
        let cfg = terms(param)?;
        // The port a bind held is not needed by a connecting id.
        st.port = None;
        st.phase = plan.next;
        drop(st);
        // As the kernel's iWARP CM does within rdma_connect, the connection is made and
        // MPA's request sent before this returns, where that is quick: a program's
        // connections then reach the listener in the order it made them (perftest -R -q N
        // pairs its QPs by that order). The reply, and what is slow (a peer far away, a
        // listener not up yet: `connect_patiently`), are waited for on a thread.
        let sent = mpa::request_from(src.ip(), dst, cfg.clone(), QUICK_CONNECT);
        let id = self.inner.clone();
        std::thread::Builder::new()
            .name("oxrdma-iwarp-connect".into())
            .spawn(move || {
                let up = match sent {
                    Ok(sent) => sent.reply(SETUP_TIMEOUT),
                    Err(_) => connect_patiently(src.ip(), dst, cfg),
                };
                id.connected(qpn, up);
            })?;
        Ok(())
    }

    /// `rdma_accept` of a requested id: MPA's reply with `param`'s private data, and the
    /// attached QP takes the stream (RTS); `Established` follows. If the reply or the QP
    /// fails, the call does and the id's request is over.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::Accept)?;
        let Some(qpn) = st.qpn else {
            return Err(Error::CmState(
                "an iWARP connection needs a QP: attach one first (rdma_create_qp)",
            ));
        };
        let cfg = terms(param)?;
        let (req, _slot) = st.request.take().expect("a requested id holds its request");
        let up = req
            .accept_with(&cfg.private_data)
            .map_err(setup_error)
            .and_then(|est| self.inner.take_stream(qpn, est))
            .and_then(|()| self.inner.take_qp_step(&st, &plan));
        if let Err(e) = up {
            let _ = self.inner.move_to(&st, QpState::Err);
            st.phase = Phase::Done;
            return Err(e);
        }
        st.phase = plan.next;
        Ok(())
    }

    /// `rdma_reject` of a requested id: MPA's reply refuses, with `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::Reject)?;
        st.phase = plan.next;
        match st.request.take() {
            Some((req, _slot)) => req.reject(private_data).map_err(setup_error),
            None => Ok(()),
        }
    }

    /// `rdma_disconnect`: the QP goes to ERR and its stream closes (iWARP's DREQ);
    /// `Disconnected` comes on both sides as the stream ends.
    pub fn disconnect(&self) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = plan(&st, Call::Disconnect)?;
        let moved = self.inner.take_qp_step(&st, &plan);
        st.phase = plan.next;
        drop(st);
        self.inner.engine.shared().ring();
        moved
    }
}

/// The machine's plan for `call` now (`machine.rs`), or its refusal.
fn plan(st: &IwState, call: Call) -> Result<Plan> {
    machine::call(st.phase, call, false, st.qpn.is_some()).map_err(Error::CmState)
}

/// TCP and MPA to `dst`; a connection refused for want of a listener is tried again
/// every `LISTEN_RETRY` for `LISTEN_GRACE` after the first try, as the IB CM does with a
/// REJ "invalid service ID" (`oxrdma_core::cm::CmConfig::listen_grace`): perftest's
/// server listens again for each connection after the first, counting on the other side
/// to be slower than that.
fn connect_patiently(
    src: IpAddr,
    dst: SocketAddr,
    cfg: oxrdma_core::iwarp::SetupConfig,
) -> std::result::Result<Established, MpaError> {
    let first = std::time::Instant::now();
    loop {
        match mpa::connect_from(src, dst, cfg.clone(), SETUP_TIMEOUT) {
            Err(MpaError::Io(e))
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && first.elapsed() < LISTEN_GRACE =>
            {
                std::thread::sleep(LISTEN_RETRY);
            }
            done => return done,
        }
    }
}

/// How long `connect` waits for the TCP connection itself before leaving it to its thread.
const QUICK_CONNECT: std::time::Duration = std::time::Duration::from_millis(10);

/// See `connect_patiently`.
const LISTEN_GRACE: std::time::Duration = std::time::Duration::from_millis(100);
const LISTEN_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// MPA's terms from the caller's parameters: private data within MPA's 508 bytes (512
/// less RFC 6581's 4), READ depths ([`MAX_DEPTH`]: the device's).
fn terms(param: &ConnParam) -> Result<oxrdma_core::iwarp::SetupConfig> {
    if param.private_data.len() > 508 {
        return Err(Error::Io(std::io::Error::from_raw_os_error(libc::EINVAL)));
    }
    let depth = |d: u8| match d {
        MAX_DEPTH => DEVICE_DEPTH,
        d => u16::from(d),
    };
    let mut cfg = setup_config(&param.private_data);
    cfg.ird = depth(param.responder_resources);
    cfg.ord = depth(param.initiator_depth);
    Ok(cfg)
}

impl IwInner {
    fn push(self: &Arc<Self>, what: What) {
        let (id, key) = (Arc::downgrade(self), self.key);
        lock(&self.channel)
            .queue
            .push(Raw::Own(Box::new(Happened { id, key, what })));
    }

    /// Moves the attached QP (through its mover, else the engine).
    fn move_qp(&self, st: &IwState, attr: &QpAttr) -> Result<()> {
        let Some(qpn) = st.qpn else {
            return Ok(());
        };
        match &st.mover {
            Some(m) => m
                .modify(attr)
                .map_err(|e| Error::Io(std::io::Error::from_raw_os_error(e))),
            None => Ok(self.engine.shared().lock().engine.modify_qp(qpn, attr)?),
        }
    }

    /// The attached QP's step of `plan`. Its stream took it to RTS in the engine already;
    /// `ToRts` brings the program's view along (RTS to RTS in the engine changes nothing).
    fn take_qp_step(&self, st: &IwState, plan: &Plan) -> Result<()> {
        match plan.qp {
            QpStep::Keep => Ok(()),
            QpStep::ToRts => self.move_to(st, QpState::Rts),
            QpStep::ToErr => self.move_to(st, QpState::Err),
        }
    }

    /// Moves the attached QP to `state`, nothing else asked.
    fn move_to(&self, st: &IwState, state: QpState) -> Result<()> {
        let attr = QpAttr {
            qp_state: Some(state),
            ..Default::default()
        };
        self.move_qp(st, &attr)
    }

    /// QP `qpn` takes the stream MPA's exchange made, and the connection's being up waits
    /// for the application, ahead of anything the stream's end may bring (both are queued
    /// with the device held, where the stream's end is seen).
    fn take_stream(self: &Arc<Self>, qpn: u32, est: Established) -> Result<()> {
        let peer = est.negotiated.clone();
        let mut conn = empty_conn();
        conn.private_data = peer.peer_private_data;
        conn.responder_resources = u8::try_from(peer.ird).unwrap_or(u8::MAX);
        conn.initiator_depth = u8::try_from(peer.ord).unwrap_or(u8::MAX);
        conn.qp_num = qpn;
        let me: Weak<dyn StreamEnded> = Arc::downgrade(self) as Weak<IwInner>;
        attach_stream(&self.engine, qpn, est, |shared| {
            shared.cm.route_iwarp(qpn, me);
            self.push(What::Up(conn));
        })
    }

    /// What came of an active id's MPA exchange: the QP takes the stream, or the failure
    /// waits for the application.
    fn connected(self: &Arc<Self>, qpn: u32, done: std::result::Result<Established, MpaError>) {
        let failed = match done.map(|est| self.take_stream(qpn, est)) {
            Ok(Ok(())) => return,
            Ok(Err(e)) => (
                Event::ConnectError {
                    status: -errno_of(&e, libc::EIO),
                },
                Vec::new(),
            ),
            Err(e) => failure(e),
        };
        self.push(What::Failed(failed.0, failed.1));
    }

    /// The machine's plan for `what` carried out: the application's event, if any.
    fn on_event(self: &Arc<Self>, what: What) -> Option<CmEvent> {
        let mut st = lock(&self.st);
        let (event, mut conn) = match what {
            What::Local(event) => return Some(plain(self.key, event, 0)),
            What::Request(child, conn) => {
                let mut e = plain(child.key, CmEventType::ConnectRequest, 0);
                e.listen_id = Some(CmIdKey(self.key));
                e.conn = conn;
                e.new_id = Some(CmId::from_iwarp(IwarpId::held(child)));
                return Some(e);
            }
            // No RTU on iWARP: the active side's is the REP's plan, the passive side's
            // the connection's establishment.
            What::Up(conn) if st.phase == Phase::Connecting => (Event::Reply, conn),
            What::Up(conn) => (Event::Established, conn),
            What::Failed(event, private_data) => (
                event,
                ConnParam {
                    private_data,
                    ..empty_conn()
                },
            ),
            What::Ended => (Event::Disconnected, empty_conn()),
        };
        let mut plan = machine::event(st.phase, event, st.qpn.is_some());
        if let Err(e) = self.take_qp_step(&st, &plan) {
            plan = machine::qp_failed(plan, st.phase, errno_of(&e, libc::EINVAL));
            let _ = self.take_qp_step(&st, &plan);
        }
        st.phase = plan.next;
        let (event, status) = plan.show?;
        if event == CmEventType::ConnectError {
            conn = empty_conn();
        }
        Some(CmEvent {
            conn,
            ..plain(self.key, event, status)
        })
    }
}

/// The errno an error stands for: an I/O error's own (`io_default` if it has none), else
/// EINVAL.
fn errno_of(e: &Error, io_default: i32) -> i32 {
    match e {
        Error::Io(io) => io.raw_os_error().unwrap_or(io_default),
        _ => libc::EINVAL,
    }
}

/// A failed MPA exchange as the event Linux's RDMA CM shows for it on iWARP, with the
/// peer's private data if it refused.
fn failure(e: MpaError) -> (Event, Vec<u8>) {
    let refused = Event::Rejected {
        reason: ECONNREFUSED,
    };
    match e {
        MpaError::Rejected { private_data } => (refused, private_data),
        MpaError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            (refused, Vec::new())
        }
        MpaError::TimedOut(_) => (Event::Unreachable, Vec::new()),
        MpaError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            (Event::Unreachable, Vec::new())
        }
        MpaError::Io(io) => (
            Event::ConnectError {
                status: -io.raw_os_error().unwrap_or(libc::ECONNRESET),
            },
            Vec::new(),
        ),
        MpaError::Setup(_) | MpaError::Closed => (
            Event::ConnectError {
                status: -libc::ECONNRESET,
            },
            Vec::new(),
        ),
    }
}

impl OwnEvent for Happened {
    fn is_for(&self, key: u64) -> bool {
        self.key == key
    }

    fn take(self: Box<Self>) -> Option<CmEvent> {
        self.id.upgrade()?.on_event(self.what)
    }
}

impl StreamEnded for IwInner {
    /// The connection's stream ended (the engine thread saw it, with the device locked):
    /// queued behind the connection's being up, as it was seen after it.
    fn stream_ended(self: Arc<Self>) {
        self.push(What::Ended);
    }
}

/// A listener's thread: takes each TCP connection on `port` and reads its MPA request on
/// a thread of its own (a slow peer holds up no other), while its backlog has room, until
/// the listener's id is gone. The requests are shown in the order of their connections
/// (`turns.rs`).
fn take_requests(
    port: &TcpListener,
    listener: &Weak<IwInner>,
    backlog: &Arc<Backlog>,
    turns: &Arc<Turns>,
) {
    loop {
        let Some(slot) = backlog.wait_for_room(|| listener.strong_count() > 0) else {
            return;
        };
        let sock = port.accept();
        if listener.strong_count() == 0 {
            return;
        }
        let Ok((sock, _)) = sock else {
            // (Out of descriptors, say: try again in a while rather than spin.)
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        let (listener, turns) = (listener.clone(), turns.clone());
        let turn = turns.take();
        let _ = std::thread::Builder::new()
            .name("oxrdma-iwarp-request".into())
            .spawn(move || {
                if let Ok(req) = Request::read(sock, setup_config(&[]), SETUP_TIMEOUT) {
                    turns.wait_for(turn, turns::WAIT);
                    match listener.upgrade() {
                        Some(l) => l.requested(req, slot),
                        None => drop(req.reject(&[])),
                    }
                }
                turns.done(turn);
            });
    }
}

impl IwInner {
    /// A peer's request for this listener: a new id holds it, shown as `ConnectRequest`.
    fn requested(self: &Arc<Self>, req: Request, slot: Slot) {
        let (src, dst) = (req.local_addr().ok(), req.peer_addr().ok());
        let mut conn = empty_conn();
        conn.private_data = req.private_data.clone();
        conn.responder_resources = u8::try_from(req.ord).unwrap_or(u8::MAX);
        conn.initiator_depth = u8::try_from(req.ird).unwrap_or(u8::MAX);
        let child = Arc::new(IwInner {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            ctx: self.ctx.clone(),
            engine: self.engine.clone(),
            channel: Mutex::new(lock(&self.channel).clone()),
            ps: self.ps,
            st: Mutex::new(IwState {
                src,
                dst,
                phase: Phase::Requested,
                request: Some((Box::new(req), slot)),
                ..IwState::default()
            }),
        });
        self.push(What::Request(child, conn));
    }
}

impl IwInner {
    /// A listener's port stops listening, and its thread waiting in accept ends: the port
    /// is free for another listener at once (its socket, still open in that thread a
    /// moment, no longer listens).
    fn stop_listening(&self) {
        let st = lock(&self.st);
        if let (Phase::Listening, Some(port)) = (&st.phase, &st.port) {
            let _ = rustix::net::shutdown(port.as_fd(), rustix::net::Shutdown::Both);
        }
    }
}

impl Drop for IwInner {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(qpn) = st.qpn {
            self.engine.shared().cm.unroute_iwarp(qpn);
        }
        // A request nobody answered is refused, as destroying a requested id does.
        if let Some((req, _slot)) = st.request.take() {
            let _ = req.reject(&[]);
        }
        // So are a listener's requests still queued (a request's thread may hold the
        // listener for a moment after its program let it go, and queue one more): their
        // ids, dropped here, refuse them.
        let key = self.key;
        let orphans = lock(&self.channel)
            .queue
            .take_where(|r| matches!(r, Raw::Own(e) if e.is_for(key)));
        drop(orphans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener's port is free again as soon as the program lets its id go, even while
    /// a thread of the id's own still holds the id (as a request's thread does right after
    /// it queued its request): perftest's `-R` listens on the same port again at once.
    #[test]
    fn a_listeners_port_is_free_once_the_program_lets_it_go() {
        let ctx = Context::open_iwarp("127.0.0.157".parse().unwrap()).unwrap();
        let ch = EngineChannel::new().unwrap();
        let id = IwarpId::create(&ch, &ctx, PortSpace::Tcp, QpType::Rc).unwrap();
        id.bind_addr("127.0.0.157:0".parse().unwrap()).unwrap();
        id.listen(8).unwrap();
        let addr = id.local_addr().unwrap();
        let thread_holds = id.inner.clone();
        drop(id);
        let again = TcpListener::bind(addr);
        assert!(again.is_ok(), "{addr} still taken: {again:?}");
        drop(thread_holds);
    }
}
