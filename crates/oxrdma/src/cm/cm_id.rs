//! librdmacm's event API as the program sees it: [`CmId`] and [`EventChannel`], each the
//! engine's (`id.rs`, `channel.rs`) or the system's librdmacm on an rdma-core device
//! (`rdma_core/cm_id.rs`), chosen by the device and channel they are made on.

use super::channel::EngineChannel;
use super::iwarp_id::IwarpId;
use super::state::EngineId;
use super::steps::QpMover;
use super::{CmEvent, CmIdKey, ConnParam, PortSpace};
use crate::context::{Backend, Context};
use crate::error::{Error, Result};
use crate::qp::QueuePair;
use crate::rdma_core::{RcChannel, RcId};
use oxrdma_core::{Gid, QpAttr, QpState, QpType, VerbsError};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// An event channel (`rdma_event_channel`): [`EventChannel::get_event`] takes the next
/// event of its ids, and its descriptor is readable while one waits (for poll, epoll or
/// an async runtime).
///
/// A channel serves one backend's devices: [`EventChannel::new`] follows `OXRDMA_BACKEND`
/// as [`Context::open`] does, [`EventChannel::for_context`] follows a context.
#[derive(Debug, Clone)]
pub struct EventChannel {
    kind: ChannelKind,
}

#[derive(Debug, Clone)]
enum ChannelKind {
    Engine(EngineChannel),
    RdmaCore(Arc<RcChannel>),
}

impl EventChannel {
    /// `rdma_create_event_channel`: for the engine's devices, or for rdma-core's when
    /// `OXRDMA_BACKEND=rdma-core` (as [`Context::open`] chooses).
    pub fn new() -> Result<EventChannel> {
        match crate::context::backend_from_env()? {
            Backend::Engine => EventChannel::new_engine(),
            Backend::RdmaCore => EventChannel::new_rdma_core(),
        }
    }

    /// A channel for the ids of `ctx`'s devices (and of its backend's others).
    pub fn for_context(ctx: &Context) -> Result<EventChannel> {
        match ctx.backend() {
            Backend::Engine => EventChannel::new_engine(),
            Backend::RdmaCore => EventChannel::new_rdma_core(),
        }
    }

    /// A channel for the engine's devices, whatever `OXRDMA_BACKEND` says.
    pub fn new_engine() -> Result<EventChannel> {
        Ok(EventChannel {
            kind: ChannelKind::Engine(EngineChannel::new()?),
        })
    }

    /// A channel of the system's librdmacm, for rdma-core devices.
    pub fn new_rdma_core() -> Result<EventChannel> {
        Ok(EventChannel {
            kind: ChannelKind::RdmaCore(RcChannel::new()?),
        })
    }

    /// Which devices' ids it serves.
    pub fn backend(&self) -> Backend {
        match self.kind {
            ChannelKind::Engine(_) => Backend::Engine,
            ChannelKind::RdmaCore(_) => Backend::RdmaCore,
        }
    }

    /// The next event: waits for one unless the channel was made non-blocking (`Ok(None)`
    /// then, as `rdma_get_cm_event` fails with EAGAIN).
    pub fn get_event(&self) -> Result<Option<CmEvent>> {
        match &self.kind {
            ChannelKind::Engine(c) => c.get_event(),
            ChannelKind::RdmaCore(c) => c.next((c.is_nonblocking()).then_some(Duration::ZERO)),
        }
    }

    /// The next event if one waits.
    pub fn try_event(&self) -> Option<CmEvent> {
        match &self.kind {
            ChannelKind::Engine(c) => c.try_event(),
            // A failure of the library itself shows on the next blocking call.
            ChannelKind::RdmaCore(c) => c.next(Some(Duration::ZERO)).ok().flatten(),
        }
    }

    /// The next event, waiting up to `timeout` for one (`Ok(None)`: none came).
    pub fn get_event_timeout(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        match &self.kind {
            ChannelKind::Engine(c) => c.get_event_timeout(timeout),
            ChannelKind::RdmaCore(c) => c.next(Some(timeout)),
        }
    }

    /// Makes [`Self::get_event`] return `Ok(None)` at once when no event waits (as
    /// `O_NONBLOCK` on the descriptor does), or wait again.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        match &self.kind {
            ChannelKind::Engine(c) => c.set_nonblocking(nonblocking),
            ChannelKind::RdmaCore(c) => {
                c.set_nonblocking(nonblocking);
                Ok(())
            }
        }
    }

    pub(crate) fn engine(&self) -> Option<&EngineChannel> {
        match &self.kind {
            ChannelKind::Engine(c) => Some(c),
            ChannelKind::RdmaCore(_) => None,
        }
    }

    fn rdma_core(&self) -> Option<&Arc<RcChannel>> {
        match &self.kind {
            ChannelKind::Engine(_) => None,
            ChannelKind::RdmaCore(c) => Some(c),
        }
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.kind {
            ChannelKind::Engine(c) => c.as_fd(),
            ChannelKind::RdmaCore(c) => c.fd(),
        }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// An RDMA CM id (`rdma_cm_id`): bind, resolve, connect or listen, accept; its events
/// come on its channel. Dropping the last clone destroys it (`rdma_destroy_id`): a
/// connection is disconnected, a request rejected, a listener's port freed.
///
/// An attached QP ([`CmId::attach_qp`]) is the id's to move, as with librdmacm's
/// `rdma_create_qp`: RTR and RTS on `accept` or the REP (the program then sees
/// `Established`), ERR on a rejection or `disconnect`.
#[derive(Debug, Clone)]
pub struct CmId {
    kind: IdKind,
}

#[derive(Debug, Clone)]
enum IdKind {
    Engine(EngineId),
    RdmaCore(Arc<RcId>),
    /// An iWARP device's (TCP and MPA, `iwarp_id.rs`).
    Iwarp(IwarpId),
}

impl CmId {
    pub(crate) fn from_engine(id: EngineId) -> CmId {
        CmId {
            kind: IdKind::Engine(id),
        }
    }

    pub(crate) fn from_rdma_core(id: Arc<RcId>) -> CmId {
        CmId {
            kind: IdKind::RdmaCore(id),
        }
    }

    pub(crate) fn from_iwarp(id: IwarpId) -> CmId {
        CmId {
            kind: IdKind::Iwarp(id),
        }
    }
}

/// The error of an id whose device and channel are of different backends.
const MIXED: Error = Error::Unsupported(
    "an id on a channel of another backend than its device's (EventChannel::for_context)",
);

impl CmId {
    /// `rdma_create_id` on `ctx`'s device: RC for every port space but UDP (UD).
    pub fn new(channel: &EventChannel, ctx: &Context, ps: PortSpace) -> Result<CmId> {
        let qp_type = if ps == PortSpace::Udp {
            QpType::Ud
        } else {
            QpType::Rc
        };
        CmId::with_type(channel, ctx, ps, qp_type)
    }

    /// `rdma_create_id` with an explicit QP type (`RDMA_PS_IB` ids choose theirs; on an
    /// rdma-core device only TCP with RC and UDP with UD).
    pub fn with_type(
        channel: &EventChannel,
        ctx: &Context,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Result<CmId> {
        match (&channel.kind, ctx.backend()) {
            (ChannelKind::Engine(c), Backend::Engine)
                if ctx.transport() == oxrdma_core::DeviceTransport::Iwarp =>
            {
                IwarpId::create(c, ctx, ps, qp_type).map(CmId::from_iwarp)
            }
            (ChannelKind::Engine(c), Backend::Engine) => {
                EngineId::with_type(c, ctx, ps, qp_type).map(CmId::from_engine)
            }
            (ChannelKind::RdmaCore(c), Backend::RdmaCore) => {
                RcId::create(c, ctx, ps, qp_type).map(CmId::from_rdma_core)
            }
            _ => Err(MIXED),
        }
    }

    /// How this id's connections are secured (`SecureMode`; without this call,
    /// `OXRDMA_SECURE`): a listener's requests take its mode. Before `connect` or
    /// `accept`; then [`QueuePair::is_secure`] tells what came of it. Secure QPs are the
    /// engine's: on an rdma-core device connections are plain, and this is refused.
    pub fn set_secure(&self, mode: crate::secure::SecureMode) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => {
                id.set_secure(mode);
                Ok(())
            }
            IdKind::RdmaCore(_) | IdKind::Iwarp(_) => Err(Error::Unsupported("secure connections")),
        }
    }

    /// Its process-wide name, as its events give it.
    pub fn key(&self) -> CmIdKey {
        match &self.kind {
            IdKind::Engine(id) => id.key(),
            IdKind::RdmaCore(id) => CmIdKey(id.key),
            IdKind::Iwarp(id) => id.key(),
        }
    }

    /// The device it was made on.
    pub fn context(&self) -> &Context {
        match &self.kind {
            IdKind::Engine(id) => id.context(),
            IdKind::RdmaCore(id) => &id.ctx,
            IdKind::Iwarp(id) => id.context(),
        }
    }

    /// Its port space.
    pub fn port_space(&self) -> PortSpace {
        match &self.kind {
            IdKind::Engine(id) => id.port_space(),
            IdKind::RdmaCore(id) => id.ps,
            IdKind::Iwarp(id) => id.port_space(),
        }
    }

    /// The type of QP it connects.
    pub fn qp_type(&self) -> QpType {
        match &self.kind {
            IdKind::Engine(id) => id.qp_type(),
            IdKind::RdmaCore(id) => id.qp_type,
            IdKind::Iwarp(_) => QpType::Rc,
        }
    }

    /// The device GID the connection comes from, and its index in the device's table.
    pub fn local_gid(&self) -> (Gid, u8) {
        match &self.kind {
            IdKind::Engine(id) => id.local_gid(),
            IdKind::RdmaCore(id) => {
                let gids = id.ctx.gids();
                let at = self
                    .local_addr()
                    .and_then(|a| gids.iter().position(|&g| g == Gid::from(a.ip())))
                    .unwrap_or(0);
                (gids.get(at).copied().unwrap_or(id.ctx.gid()), at as u8)
            }
            IdKind::Iwarp(id) => (id.context().gid(), 0),
        }
    }

    /// The local address and port (after bind, resolve or a request).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.kind {
            IdKind::Engine(id) => id.local_addr(),
            IdKind::RdmaCore(id) => id.local_addr(),
            IdKind::Iwarp(id) => id.local_addr(),
        }
    }

    /// The peer's address and port.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match &self.kind {
            IdKind::Engine(id) => id.peer_addr(),
            IdKind::RdmaCore(id) => id.peer_addr(),
            IdKind::Iwarp(id) => id.peer_addr(),
        }
    }

    /// The peer device's GID (where its QP is).
    pub fn peer_gid(&self) -> Option<Gid> {
        match &self.kind {
            IdKind::Engine(id) => id.peer_gid(),
            IdKind::RdmaCore(id) => id.peer_addr().map(|a| Gid::from(a.ip())),
            IdKind::Iwarp(id) => id.peer_gid(),
        }
    }

    /// The QP attached with [`CmId::attach_qp`].
    pub fn qp_num(&self) -> Option<u32> {
        match &self.kind {
            IdKind::Engine(id) => id.qp_num(),
            IdKind::RdmaCore(id) => id.qp_num(),
            IdKind::Iwarp(id) => id.qp_num(),
        }
    }

    /// `rdma_bind_addr`: the local address (unspecified: any) and port (0: one is picked
    /// when listening or connecting).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.bind_addr(addr),
            IdKind::RdmaCore(id) => id.bind_addr(addr),
            IdKind::Iwarp(id) => id.bind_addr(addr),
        }
    }

    /// `rdma_listen`: connection requests come as `ConnectRequest` events, each with a
    /// new id to accept or reject.
    pub fn listen(&self, backlog: usize) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.listen(backlog),
            IdKind::RdmaCore(id) => id.listen(backlog),
            IdKind::Iwarp(id) => id.listen(backlog),
        }
    }

    /// `rdma_resolve_addr`: finds the device that reaches `dst` (from `src` if given);
    /// `AddrResolved` or `AddrError` follows.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.resolve_addr(src, dst),
            IdKind::RdmaCore(id) => id.resolve_addr(src, dst),
            IdKind::Iwarp(id) => id.resolve_addr(src, dst),
        }
    }

    /// `rdma_resolve_route`: `RouteResolved` or `RouteError` follows. On an rdma-core
    /// device the address must have resolved to this id's device.
    pub fn resolve_route(&self) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.resolve_route(),
            IdKind::RdmaCore(id) => id.resolve_route(),
            IdKind::Iwarp(id) => id.resolve_route(),
        }
    }

    /// Makes `qp` this id's (`rdma_create_qp` with a QP made by the caller): it goes to
    /// INIT (a UD QP on to RTS with the port space's Q_Key), and the id moves it on as the
    /// connection goes (RTR and RTS on `accept` or the REP, ERR on a rejection or
    /// disconnect). On an rdma-core device the id must know its device already (after
    /// resolution, or a request's) and the QP must be of that device.
    pub fn attach_qp(&self, qp: &QueuePair) -> Result<()> {
        if qp.qp_type() != self.qp_type() {
            return Err(Error::CmState("the QP's type is not the id's"));
        }
        match &self.kind {
            IdKind::Engine(id) => id.attach_qp(qp),
            IdKind::Iwarp(id) => id.attach(qp.engine("an iWARP id's QP")?.qpn, None),
            IdKind::RdmaCore(id) => match qp.rdma_core_qp() {
                Some(q) => id.attach_qp(q),
                None => Err(VerbsError::InvalidArgument("an engine QP on an rdma-core id").into()),
            },
        }
    }

    /// [`Self::attach_qp`] for a QP this id moves through `mover` rather than the engine:
    /// the C library's, whose program's `struct ibv_qp` must follow every move. An engine
    /// device's.
    pub fn attach_qp_with(&self, qpn: u32, mover: Arc<dyn QpMover>) -> Result<()> {
        if let IdKind::Iwarp(id) = &self.kind {
            return id.attach(qpn, Some(mover));
        }
        self.engine("moving a QP through a QpMover")?
            .attach_qp_with(qpn, mover)
    }

    /// Forgets the attached QP (`rdma_destroy_qp`): the id moves it no more.
    pub fn detach_qp(&self) {
        match &self.kind {
            IdKind::Engine(id) => id.detach_qp(),
            IdKind::RdmaCore(id) => id.detach_qp(),
            IdKind::Iwarp(id) => id.detach_qp(),
        }
    }

    /// `rdma_init_qp_attr`: the attributes that take a QP of this connection to `state`
    /// (INIT, RTR or RTS), for callers that move their own QP.
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        match &self.kind {
            IdKind::Engine(id) => id.init_qp_attr(state),
            IdKind::RdmaCore(id) => id.init_qp_attr(state),
            IdKind::Iwarp(id) => id.init_qp_attr(state),
        }
    }

    /// `rdma_migrate_id`: from now on this id's events (and a listener's requests) go to
    /// `to`; those already waiting on its old channel move with it, in order (on an
    /// engine device).
    pub fn migrate(&self, to: &EventChannel) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => {
                id.migrate(to.engine().ok_or(MIXED)?);
                Ok(())
            }
            IdKind::RdmaCore(id) => id.migrate(to.rdma_core().ok_or(MIXED)?),
            IdKind::Iwarp(id) => {
                id.migrate(to.engine().ok_or(MIXED)?);
                Ok(())
            }
        }
    }

    /// `rdma_connect`: sends the REQ (a SIDR request for UD) with `param`'s private data
    /// and depths, the attached QP's number in it.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.connect(param),
            IdKind::RdmaCore(id) => id.connect(param),
            IdKind::Iwarp(id) => id.connect(param),
        }
    }

    /// `rdma_accept` of a requested id: the attached QP goes to RTR and RTS and the REP
    /// (or SIDR reply) goes with `param`'s private data.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.accept(param),
            IdKind::RdmaCore(id) => id.accept(param),
            IdKind::Iwarp(id) => id.accept(param),
        }
    }

    /// `rdma_reject` of a requested id, the REJ carrying `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.reject(private_data),
            IdKind::RdmaCore(id) => id.reject(private_data),
            IdKind::Iwarp(id) => id.reject(private_data),
        }
    }

    /// `rdma_establish`: the RTU, for a caller that moved its own QP after
    /// `ConnectResponse`.
    pub fn establish(&self) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.establish(),
            IdKind::RdmaCore(id) => id.establish(),
            IdKind::Iwarp(_) => Err(Error::CmState(
                "rdma_establish is for IB connections; an iWARP one is established by MPA",
            )),
        }
    }

    /// `rdma_disconnect`: the attached QP goes to ERR and the DREQ goes; both sides get
    /// `Disconnected`.
    pub fn disconnect(&self) -> Result<()> {
        match &self.kind {
            IdKind::Engine(id) => id.disconnect(),
            IdKind::RdmaCore(id) => id.disconnect(),
            IdKind::Iwarp(id) => id.disconnect(),
        }
    }

    fn engine(&self, what: &'static str) -> Result<&EngineId> {
        match &self.kind {
            IdKind::Engine(id) => Ok(id),
            IdKind::RdmaCore(_) | IdKind::Iwarp(_) => Err(Error::Unsupported(what)),
        }
    }
}
