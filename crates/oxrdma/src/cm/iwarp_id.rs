//! The RDMA CM's ids on an iWARP device (`Context::open_iwarp`): a connection is a TCP
//! connection and MPA's exchange on it (RFC 5044 with RFC 6581), as Linux's iw_cm makes
//! them for siw, not the IB CM's MADs. The id's port is the TCP port and its private data
//! is MPA's, unchanged (no CMA header). Both sides see `Established` (no
//! `ConnectResponse`); a refusal is `Rejected` with -ECONNREFUSED (also a port nobody
//! listens on), no answer `Unreachable` with -ETIMEDOUT, anything else `ConnectError`;
//! `Disconnected` comes on each side once the connection's stream ends.
//!
//! TCP's connect and MPA's request wait on the network, so an id's connect, and each
//! listener's accepting, runs on a thread of its own that reports on the id's channel.

use super::channel::{EngineChannel, StreamEnded};
use super::incoming::plain;
use super::state::{ChannelInner, Raw, NEXT_KEY};
use super::steps::{QpMover, MAX_DEPTH};
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
}

#[derive(Debug)]
pub(crate) struct IwInner {
    key: u64,
    ctx: Context,
    engine: EngineContext,
    channel: Mutex<Arc<ChannelInner>>,
    ps: PortSpace,
    st: Mutex<IwState>,
    /// What the application was shown of the connection; the engine thread (which sees
    /// the stream end) and the connecting thread meet here, never under the id's state.
    shown: Mutex<Shown>,
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
}

#[derive(Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    Connecting,
    /// A peer's request, to accept or reject.
    Requested(Box<Request>),
    Connected,
    Over,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Shown {
    #[default]
    Nothing,
    Established,
    /// The stream ended before `Established` was shown: shown right after it.
    EndedEarly,
    Disconnected,
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
        Ok(IwarpId {
            inner: Arc::new(IwInner {
                key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
                ctx: ctx.clone(),
                engine,
                channel: Mutex::new(channel.inner.clone()),
                ps,
                st: Mutex::default(),
                shown: Mutex::default(),
            }),
        })
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
        if !matches!(st.phase, Phase::Idle) {
            return Err(Error::CmState("rdma_bind_addr on an id bound or in use"));
        }
        if !super::route::is_local(addr.ip()) {
            return Err(Error::Io(std::io::Error::from_raw_os_error(
                libc::EADDRNOTAVAIL,
            )));
        }
        let port = TcpListener::bind(addr)?;
        st.src = Some(port.local_addr()?);
        st.port = Some(Arc::new(port));
        st.phase = Phase::Bound;
        Ok(())
    }

    /// `rdma_listen`: peers' requests come as `ConnectRequest` events, each with a new id
    /// holding the peer's private data and its connection, to accept or reject.
    pub fn listen(&self, _backlog: usize) -> Result<()> {
        if matches!(lock(&self.inner.st).phase, Phase::Idle) {
            self.bind_addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
        }
        let mut st = lock(&self.inner.st);
        let Phase::Bound = st.phase else {
            return Err(Error::CmState("rdma_listen on an id not bound, or in use"));
        };
        let port = st.port.clone().expect("a bound id holds its port");
        let me = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name("oxrdma-iwarp-listen".into())
            .spawn(move || take_requests(&port, &me))?;
        st.phase = Phase::Listening;
        Ok(())
    }

    /// `rdma_resolve_addr`: the device's own address is the source (this id is on it);
    /// whether the peer answers shows at `connect`.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        let mut st = lock(&self.inner.st);
        if !matches!(st.phase, Phase::Idle | Phase::Bound) {
            return Err(Error::CmState("rdma_resolve_addr on an id in use"));
        }
        // The connection comes from the device's address unless one was named.
        let named = st.src.or(src).filter(|s| !s.ip().is_unspecified());
        let port = st.src.map_or(0, |s| s.port());
        let ip = named.map_or(self.inner.ctx.gid().ip(), |s| s.ip());
        st.src = Some(SocketAddr::new(ip, port));
        st.dst = Some(dst);
        st.phase = Phase::AddrResolved;
        self.inner
            .push(plain(self.inner.key, CmEventType::AddrResolved, 0));
        Ok(())
    }

    /// `rdma_resolve_route`: nothing to find over TCP; `RouteResolved` follows.
    pub fn resolve_route(&self) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let Phase::AddrResolved = st.phase else {
            return Err(Error::CmState(
                "rdma_resolve_route before the address resolved",
            ));
        };
        st.phase = Phase::RouteResolved;
        self.inner
            .push(plain(self.inner.key, CmEventType::RouteResolved, 0));
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
            .take_where(|r| matches!(r, Raw::Made(e) if e.id == key));
        for r in moving {
            to.inner.queue.push(r);
        }
        *cur = to.inner.clone();
    }

    /// `rdma_connect`: TCP to the resolved address, MPA's request with `param`'s private
    /// data and depths; the attached QP is in RTS when `Established` comes.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let mut st = lock(&self.inner.st);
        if !matches!(st.phase, Phase::RouteResolved | Phase::AddrResolved) {
            return Err(Error::CmState("rdma_connect before the route resolved"));
        }
        let (Some(src), Some(dst), Some(qpn)) = (st.src, st.dst, st.qpn) else {
            return Err(Error::CmState(
                "an iWARP connection needs a QP: attach one first (rdma_create_qp)",
            ));
        };
        let cfg = terms(param)?;
        // The port a bind held is not needed by a connecting id.
        st.port = None;
        st.phase = Phase::Connecting;
        drop(st);
        let id = self.inner.clone();
        std::thread::Builder::new()
            .name("oxrdma-iwarp-connect".into())
            .spawn(move || {
                id.connected(qpn, connect_patiently(src.ip(), dst, cfg));
            })?;
        Ok(())
    }

    /// `rdma_accept` of a requested id: MPA's reply with `param`'s private data; the
    /// attached QP is in RTS and `Established` follows.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let Some(qpn) = st.qpn else {
            return Err(Error::CmState(
                "an iWARP connection needs a QP: attach one first (rdma_create_qp)",
            ));
        };
        let Phase::Requested(req) = std::mem::replace(&mut st.phase, Phase::Over) else {
            st.phase = Phase::Over;
            return Err(Error::CmState("rdma_accept of an id that has no request"));
        };
        let cfg = terms(param)?;
        drop(st);
        let done = req.accept_with(&cfg.private_data);
        self.inner.connected(qpn, done);
        Ok(())
    }

    /// `rdma_reject` of a requested id: MPA's reply refuses, with `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let mut st = lock(&self.inner.st);
        match std::mem::replace(&mut st.phase, Phase::Over) {
            Phase::Requested(req) => req.reject(private_data).map_err(setup_error),
            other => {
                st.phase = other;
                Err(Error::CmState("rdma_reject of an id that has no request"))
            }
        }
    }

    /// `rdma_disconnect`: the QP goes to ERR and its stream closes; `Disconnected` comes
    /// on both sides as the stream ends.
    pub fn disconnect(&self) -> Result<()> {
        let st = lock(&self.inner.st);
        if !matches!(st.phase, Phase::Connected) {
            return Err(Error::CmState("rdma_disconnect of an id not connected"));
        }
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        let moved = self.inner.move_qp(&st, &err);
        drop(st);
        self.inner.engine.shared().ring();
        moved
    }
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
    fn push(&self, event: CmEvent) {
        lock(&self.channel).queue.push(Raw::Made(Box::new(event)));
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

    /// What came of MPA's exchange, either side: the QP takes the stream and
    /// `Established` is shown, or the failure's event.
    fn connected(self: &Arc<Self>, qpn: u32, done: std::result::Result<Established, MpaError>) {
        let est = match done {
            Ok(est) => est,
            Err(e) => return self.failed(e),
        };
        let peer = est.negotiated.clone();
        let me: Weak<dyn StreamEnded> = Arc::downgrade(self) as Weak<IwInner>;
        if let Err(e) = attach_stream(&self.engine, qpn, est, |shared| {
            shared.cm.route_iwarp(qpn, me);
        }) {
            let errno = match &e {
                Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
                _ => libc::EINVAL,
            };
            return self.failed_with(CmEventType::ConnectError, -errno);
        }
        // The program's own view of the QP follows (RTS to RTS: nothing changes).
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        };
        {
            let mut st = lock(&self.st);
            let _ = self.move_qp(&st, &rts);
            st.phase = Phase::Connected;
        }
        let mut event = plain(self.key, CmEventType::Established, 0);
        event.conn.private_data = peer.peer_private_data;
        event.conn.responder_resources = u8::try_from(peer.ird).unwrap_or(u8::MAX);
        event.conn.initiator_depth = u8::try_from(peer.ord).unwrap_or(u8::MAX);
        event.conn.qp_num = qpn;
        let mut shown = lock(&self.shown);
        self.push(event);
        if *shown == Shown::EndedEarly {
            self.push(plain(self.key, CmEventType::Disconnected, 0));
            *shown = Shown::Disconnected;
        } else {
            *shown = Shown::Established;
        }
    }

    /// A connection that did not come up: the QP to ERR, and the event Linux's RDMA CM
    /// shows for it on iWARP.
    fn failed(&self, e: MpaError) {
        let (event, status) = match &e {
            MpaError::Rejected { private_data } => {
                let mut ev = plain(self.key, CmEventType::Rejected, ECONNREFUSED);
                ev.conn.private_data = private_data.clone();
                self.end_qp();
                return self.push(ev);
            }
            MpaError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                (CmEventType::Rejected, ECONNREFUSED)
            }
            MpaError::TimedOut(_) => (CmEventType::Unreachable, -libc::ETIMEDOUT),
            MpaError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                (CmEventType::Unreachable, -libc::ETIMEDOUT)
            }
            MpaError::Io(io) => (
                CmEventType::ConnectError,
                -io.raw_os_error().unwrap_or(libc::ECONNRESET),
            ),
            MpaError::Setup(_) | MpaError::Closed => (CmEventType::ConnectError, -libc::ECONNRESET),
        };
        self.failed_with(event, status);
    }

    fn failed_with(&self, event: CmEventType, status: i32) {
        self.end_qp();
        self.push(plain(self.key, event, status));
    }

    fn end_qp(&self) {
        let mut st = lock(&self.st);
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        let _ = self.move_qp(&st, &err);
        st.phase = Phase::Over;
    }
}

impl StreamEnded for IwInner {
    /// The connection's stream ended (the engine thread saw it, with the device locked):
    /// `Disconnected`, once, after `Established`.
    fn stream_ended(&self) {
        let mut shown = lock(&self.shown);
        match *shown {
            Shown::Established => {
                self.push(plain(self.key, CmEventType::Disconnected, 0));
                *shown = Shown::Disconnected;
            }
            Shown::Nothing => *shown = Shown::EndedEarly,
            Shown::EndedEarly | Shown::Disconnected => {}
        }
    }
}

/// A listener's thread: takes each TCP connection on `port` and reads its MPA request on
/// a thread of its own (a slow peer holds up no other), until the listener's id is gone.
fn take_requests(port: &TcpListener, listener: &Weak<IwInner>) {
    for sock in port.incoming() {
        if listener.strong_count() == 0 {
            return;
        }
        let Ok(sock) = sock else {
            // (Out of descriptors, say: try again in a while rather than spin.)
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        let listener = listener.clone();
        let _ = std::thread::Builder::new()
            .name("oxrdma-iwarp-request".into())
            .spawn(move || {
                let Ok(req) = Request::read(sock, setup_config(&[]), SETUP_TIMEOUT) else {
                    return;
                };
                if let Some(l) = listener.upgrade() {
                    l.requested(req);
                }
            });
    }
}

impl IwInner {
    /// A peer's request for this listener: a new id holds it, shown as `ConnectRequest`.
    fn requested(self: &Arc<Self>, req: Request) {
        let (src, dst) = (req.local_addr().ok(), req.peer_addr().ok());
        let mut conn = plain(0, CmEventType::ConnectRequest, 0).conn;
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
                phase: Phase::Requested(Box::new(req)),
                ..IwState::default()
            }),
            shown: Mutex::default(),
        });
        let key = CmIdKey(child.key);
        self.push(CmEvent {
            event: CmEventType::ConnectRequest,
            id: key,
            listen_id: Some(CmIdKey(self.key)),
            new_id: Some(CmId::from_iwarp(IwarpId { inner: child })),
            status: 0,
            conn,
            ud: None,
        });
    }
}

impl Drop for IwInner {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(qpn) = st.qpn {
            self.engine.shared().cm.unroute_iwarp(qpn);
        }
        // A listener's thread waits in accept: shutting the socket down ends it.
        if let (Phase::Listening, Some(port)) = (&st.phase, &st.port) {
            let _ = rustix::net::shutdown(port.as_fd(), rustix::net::Shutdown::Both);
        }
        // A request nobody answered is refused, as destroying a requested id does.
        if let Phase::Requested(req) = std::mem::take(&mut st.phase) {
            let _ = req.reject(&[]);
        }
    }
}
