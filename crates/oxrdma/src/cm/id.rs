//! `rdma_cm_id`: one endpoint of the RDMA CM (a listener, or one side of a connection),
//! its calls, and what its events do to it and its QP.

use super::channel::EngineChannel;
use super::machine::{self, Call, Plan};
use super::rendezvous::{self};
use super::route;
use super::state::{
    dev_key, einval, errno, qp_attr, EngineId, IdInner, Raw, State, ACK_TIMEOUT, EPHEMERAL,
    NEXT_KEY,
};
use super::steps::{QpMover, TO_RTS};
use super::{CmEventType, CmIdKey, PortSpace};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::qp::QueuePair;
use oxrdma_core::cm::{CmEventKind, CmId as CommId};
use oxrdma_core::{Gid, QpAttr, QpState, QpType};
use oxrdma_wire::cma::{self};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

impl EngineId {
    /// `rdma_create_id` on `ctx`'s device (an engine device's).
    pub fn with_type(
        channel: &EngineChannel,
        ctx: &Context,
        ps: PortSpace,
        qp_type: QpType,
    ) -> Result<EngineId> {
        let engine = ctx.engine("the RDMA CM")?.clone();
        let dev = dev_key(&engine);
        lock(&channel.inner.devices)
            .entry(dev)
            .or_insert_with(|| Arc::downgrade(&engine.inner.shared));
        let st = State {
            seq_num: ctx.random_psn(),
            ack_timeout: ACK_TIMEOUT,
            ..State::default()
        };
        Ok(EngineId {
            inner: Arc::new(IdInner {
                key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
                ctx: ctx.clone(),
                engine,
                dev,
                channel: Mutex::new(channel.inner.clone()),
                ps,
                qp_type,
                st: Mutex::new(st),
            }),
        })
    }

    /// How this id's connections are secured (`SecureMode`; without this call,
    /// `OXRDMA_SECURE`): a listener's requests take its mode. Before `connect` or
    /// `accept`; then [`QueuePair::is_secure`] tells what came of it.
    pub fn set_secure(&self, mode: crate::secure::SecureMode) {
        lock(&self.inner.st).secure = Some(mode);
    }

    /// Its process-wide name, as its events give it.
    pub fn key(&self) -> CmIdKey {
        CmIdKey(self.inner.key)
    }
    /// The device it was made on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }
    /// Its port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }
    /// The type of QP it connects.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }
    /// The device GID the connection comes from, and its index in the device's table.
    pub fn local_gid(&self) -> (Gid, u8) {
        let st = lock(&self.inner.st);
        self.inner.local_gid(&st)
    }

    /// The local address and port (after bind, resolve or a request).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.st).src
    }
    /// The peer's address and port.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.st).dst
    }
    /// The peer device's GID (where its QP is).
    pub fn peer_gid(&self) -> Option<Gid> {
        lock(&self.inner.st).peer
    }
    /// The QP attached with [`EngineId::attach_qp`].
    pub fn qp_num(&self) -> Option<u32> {
        lock(&self.inner.st).qp
    }

    /// `rdma_bind_addr`: the local address (unspecified: any) and port (0: one is picked
    /// when listening or connecting).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::Bind)?;
        if !addr.ip().is_unspecified() && !route::is_local(addr.ip()) {
            return Err(errno(rustix::io::Errno::ADDRNOTAVAIL));
        }
        let ps = self.inner.ps.value();
        if addr.port() != 0 && rendezvous::taken(ps, addr.port()) {
            return Err(errno(rustix::io::Errno::ADDRINUSE));
        }
        // Port 0: one is picked now, as the kernel does (qperf reads it back with
        // rdma_get_src_port and tells its peer).
        let port = match addr.port() {
            0 => {
                self.free_port(|p| (!rendezvous::taken(ps, p)).then_some(()))?
                    .0
            }
            p => p,
        };
        st.src = Some(SocketAddr::new(addr.ip(), port));
        st.phase = plan.next;
        Ok(())
    }

    /// `rdma_listen`: takes connection requests on the bound port (a free one if 0), at
    /// most `backlog` unanswered.
    pub fn listen(&self, backlog: usize) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::Listen)?;
        let ps = self.inner.ps.value();
        let src = st
            .src
            .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
        let bound = (!src.ip().is_unspecified()).then_some(src.ip());
        let entry = rendezvous::Entry {
            device: self.inner.ctx.gid().ip(),
            bound,
        };
        let (port, mut reg) = if src.port() == 0 {
            self.free_port(|p| rendezvous::register(ps, p, entry).ok())?
        } else {
            let r = rendezvous::register(ps, src.port(), entry).map_err(Error::Io)?;
            (src.port(), r)
        };
        let sid = cma::service_id(ps, port);
        let shared = self.inner.engine.shared();
        let ch = self.inner.channel();
        {
            let mut dev = shared.lock();
            dev.engine.cm_mut().listen(sid, backlog)?;
            // Other processes may share the address: the REQs must come here.
            match dev.link.listen(sid) {
                Ok(steer) => reg.steer = steer,
                Err(e) => {
                    dev.engine.cm_mut().unlisten(sid);
                    return Err(Error::Io(e));
                }
            }
            // Routed before the device is let go (the CM's events are delivered under
            // it): a REQ taken at once must find this listener, not be turned away with
            // REJ 28 (perftest's -R client across hosts, about one run in twenty).
            shared.cm.route_listener(sid, &ch);
            lock(&ch.listeners).insert((self.inner.dev, sid), Arc::downgrade(&self.inner));
        }
        st.src = Some(SocketAddr::new(src.ip(), port));
        st.listen = Some((sid, Some(reg)));
        st.phase = plan.next;
        Ok(())
    }

    /// A random port in the ephemeral range that `take` accepts.
    fn free_port<T>(&self, mut take: impl FnMut(u16) -> Option<T>) -> Result<(u16, T)> {
        let span = EPHEMERAL.end - EPHEMERAL.start;
        let start = self.inner.ctx.random_psn() % span;
        for i in 0..span {
            let port = (EPHEMERAL.start + (start + i) % span) as u16;
            if let Some(t) = take(port) {
                return Ok((port, t));
            }
        }
        Err(errno(rustix::io::Errno::ADDRINUSE))
    }

    /// `rdma_resolve_addr`: `dst` (IP and port) will be reached from this device;
    /// `ADDR_RESOLVED` follows (with `src` the local address, if given).
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        let mut st = lock(&self.inner.st);
        let plan = self.plan(&st, Call::ResolveAddr)?;
        if let Some(s) = src {
            if !s.ip().is_unspecified() && !route::is_local(s.ip()) {
                return Err(errno(rustix::io::Errno::ADDRNOTAVAIL));
            }
            st.src = Some(s);
        }
        // The source: the bound address, else the one the kernel's routing picks for the
        // destination (127.0.0.1 for 127.0.0.1, as the kernel's CM reports it: programs
        // such as libfabric look it up among the host's interface addresses), else this
        // device's.
        let own = self.inner.ctx.gid().ip();
        if let Some(errno) = route::unreachable(own, dst.ip()) {
            // As the kernel's CM: an address error event, at once; the id may try again.
            drop(st);
            self.local_event_status(CmEventType::AddrError, -errno);
            return Ok(());
        }
        let ip = match st.src.map(|s| s.ip()) {
            Some(ip) if !ip.is_unspecified() => ip,
            _ => route::source_for(dst.ip()).unwrap_or(match (own, dst) {
                (own, d) if own.is_ipv4() == d.is_ipv4() => own,
                (_, SocketAddr::V4(_)) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                _ => IpAddr::V6(Ipv6Addr::LOCALHOST),
            }),
        };
        let port = match st.src.map(|s| s.port()) {
            Some(p) if p != 0 => p,
            _ => {
                let ps = self.inner.ps.value();
                self.free_port(|p| (!rendezvous::taken(ps, p)).then_some(()))?
                    .0
            }
        };
        st.src = Some(SocketAddr::new(ip, port));
        st.dst = Some(dst);
        st.phase = plan.next;
        st.mtu = Some(self.inner.ctx.active_mtu());
        drop(st);
        self.local_event(CmEventType::AddrResolved);
        Ok(())
    }

    /// `rdma_resolve_route`: on RoCE nothing goes on the wire; `ROUTE_RESOLVED` follows.
    pub fn resolve_route(&self) -> Result<()> {
        let mut st = lock(&self.inner.st);
        st.phase = self.plan(&st, Call::ResolveRoute)?.next;
        drop(st);
        self.local_event(CmEventType::RouteResolved);
        Ok(())
    }

    /// The machine's plan for `call` now (`machine.rs`), or its refusal as `EINVAL`.
    pub(super) fn plan(&self, st: &State, call: Call) -> Result<Plan> {
        let ud = self.inner.qp_type == QpType::Ud;
        machine::call(st.phase, call, ud, st.qp.is_some()).map_err(einval)
    }

    fn local_event(&self, event: CmEventType) {
        self.local_event_status(event, 0);
    }

    /// [`Self::local_event`] with a status (a negative errno, as the kernel's CM gives).
    fn local_event_status(&self, event: CmEventType, status: i32) {
        // The application is busy with the CM now, not polling: serve the data path.
        let shared = self.inner.engine.shared();
        shared.drive_through(&mut shared.lock());
        self.inner.channel().queue.push(Raw::Local {
            id: Arc::downgrade(&self.inner),
            event,
            status,
        });
    }

    /// Makes `qp` this id's (`rdma_create_qp` with a QP made by the caller): it goes to
    /// INIT (a UD QP on to RTS with the port space's Q_Key), and the id moves it on as the
    /// connection goes (RTR and RTS on `accept` or the REP, ERR on a rejection or
    /// disconnect).
    pub fn attach_qp(&self, qp: &QueuePair) -> Result<()> {
        if qp.qp_type() != self.inner.qp_type {
            return Err(einval("the QP's type is not the id's"));
        }
        self.attach(qp.qpn(), None)
    }

    /// [`Self::attach_qp`] for a QP this id moves through `mover` rather than the engine:
    /// the C library's, whose program's `struct ibv_qp` must follow every move.
    pub fn attach_qp_with(&self, qpn: u32, mover: Arc<dyn QpMover>) -> Result<()> {
        self.attach(qpn, Some(mover))
    }

    /// Forgets the attached QP (`rdma_destroy_qp`): the id moves it no more.
    pub fn detach_qp(&self) {
        let mut st = lock(&self.inner.st);
        (st.qp, st.mover) = (None, None);
    }

    fn attach(&self, qpn: u32, mover: Option<Arc<dyn QpMover>>) -> Result<()> {
        let mut st = lock(&self.inner.st);
        (st.qp, st.mover) = (Some(qpn), mover);
        let first: &[QpState] = if self.inner.qp_type == QpType::Ud {
            &TO_RTS
        } else {
            &[QpState::Init]
        };
        self.move_qp(&st, first)
            .map_err(|e| errno(rustix::io::Errno::from_raw_os_error(e)))
    }

    /// `rdma_init_qp_attr`: the attributes that take a QP of this connection to `state`
    /// (INIT, RTR or RTS), for callers that move their own QP.
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        let st = lock(&self.inner.st);
        let sgid = self.inner.local_gid(&st).1;
        qp_attr(&st, self.inner.qp_type, self.inner.ps, state, sgid)
    }
}

impl EngineId {
    /// `rdma_migrate_id`: from now on this id's events (and a listener's requests) go to
    /// `to`; those already waiting on its old channel move with it, in order.
    pub fn migrate(&self, to: &EngineChannel) {
        let inner = &self.inner;
        let mut cur = lock(&inner.channel);
        if Arc::ptr_eq(&cur, &to.inner) {
            return;
        }
        let (old, new) = (cur.clone(), to.inner.clone());
        let st = lock(&inner.st);
        let shared = inner.engine.shared();
        lock(&new.devices)
            .entry(inner.dev)
            .or_insert_with(|| Arc::downgrade(&inner.engine.inner.shared));
        let comm = st.comm;
        let sid = st.listen.as_ref().map(|(sid, _)| *sid);
        if let Some(c) = comm {
            shared.cm.route_conn(c, &new);
            lock(&old.conns).remove(&(inner.dev, c));
            lock(&new.conns).insert((inner.dev, c), Arc::downgrade(inner));
        }
        if let Some(sid) = sid {
            shared.cm.route_listener(sid, &new);
            lock(&old.listeners).remove(&(inner.dev, sid));
            lock(&new.listeners).insert((inner.dev, sid), Arc::downgrade(inner));
        }
        drop(st);
        let me = Arc::as_ptr(inner);
        let dev = inner.dev;
        let moving = old.queue.take_where(|r| match r {
            Raw::Local { id, .. } => std::ptr::eq(id.as_ptr(), me),
            Raw::Own(_) => false,
            Raw::Core { dev: d, event } => {
                *d == dev
                    && (comm == Some(event.id.0)
                        || match &event.kind {
                            CmEventKind::ConnectRequest { req, .. } => Some(req.service_id) == sid,
                            CmEventKind::SidrRequest { req, .. } => Some(req.service_id) == sid,
                            _ => false,
                        })
            }
        });
        for r in moving {
            new.queue.push(r);
        }
        *cur = new;
    }
}

impl Drop for IdInner {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        let shared = self.engine.shared();
        let mut dev = shared.lock();
        let now = dev.now();
        if let Some(comm) = st.comm.take() {
            dev.engine.cm_mut().destroy(now, CommId(comm));
            shared.cm.unroute_conn(comm);
        }
        if let Some((sid, reg)) = st.listen.take() {
            dev.engine.cm_mut().unlisten(sid);
            shared.cm.unroute_listener(sid);
            drop(reg);
            // Requests still queued for this listener have nobody to answer them.
            let dev_key = self.dev;
            let ch = self.channel();
            let orphans = ch.queue.take_where(|r| match r {
                Raw::Core { dev, event } => {
                    dev == &dev_key
                        && match &event.kind {
                            CmEventKind::ConnectRequest { req, .. } => req.service_id == sid,
                            CmEventKind::SidrRequest { req, .. } => req.service_id == sid,
                            _ => false,
                        }
                }
                Raw::Local { .. } | Raw::Own(_) => false,
            });
            for r in orphans {
                if let Raw::Core { event, .. } = r {
                    dev.engine.cm_mut().destroy(now, event.id);
                    shared.cm.unroute_conn(event.id.0);
                }
            }
            lock(&ch.listeners).remove(&(self.dev, sid));
        }
        shared.drive_through(&mut dev);
        drop(dev);
        shared.ring();
    }
}
