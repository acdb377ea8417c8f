//! Events as the application takes them: each device CM event becomes librdmacm's, with
//! what `rdma_get_cm_event` does on the way (new ids for requests, the QP's RTR and RTS
//! and the RTU on a REP, ERR on a rejection).

use super::channel::EngineChannel;
use super::keys::{self, KeyPair};
use super::machine::{self, Event, Wire};
use super::route;
use super::state::{ChannelInner, EngineId, IdInner, Phase, Raw, State, ACK_TIMEOUT, NEXT_KEY};
use super::steps::Depths;
use super::{CmEvent, CmEventType, CmId, CmIdKey, ConnParam, UdParam};
use crate::lock::lock;
use crate::secure::{Agreed, SecureMode};
use oxrdma_core::cm::{CmEvent as CoreEvent, CmEventKind, CmId as CommId, SidrReplyParams};
use oxrdma_core::{Gid, Mtu, QpType};
use oxrdma_wire::cm::{Rep, Req, SidrReq};
use oxrdma_wire::cma::CmaHeader;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

/// Turns what waited in `ch` into the application's event, doing what librdmacm does on
/// the way; None if it concerns an id that is gone (or was answered here).
pub(crate) fn take_event(ch: &Arc<ChannelInner>, raw: Raw) -> Option<CmEvent> {
    let (dev, event) = match raw {
        Raw::Local { id, event, status } => {
            let id = id.upgrade()?;
            return Some(plain(id.key, event, status));
        }
        Raw::Core { dev, event } => (dev, event),
        Raw::Own(event) => return event.take(),
    };
    let CoreEvent { id: comm, kind } = event;
    match kind {
        CmEventKind::ConnectRequest { peer, req } => request(ch, dev, comm, peer, *req),
        CmEventKind::SidrRequest { peer, req } => sidr_request(ch, dev, comm, peer, *req),
        kind => {
            let id = lock(&ch.conns)
                .get(&(dev, comm.0))
                .and_then(|w| w.upgrade())?;
            let ends = matches!(
                kind,
                CmEventKind::Rejected { .. }
                    | CmEventKind::Unreachable
                    | CmEventKind::TimewaitExit
                    | CmEventKind::SidrReply { .. }
            );
            if ends {
                lock(&ch.conns).remove(&(dev, comm.0));
            }
            EngineId { inner: id }.on_event(kind)
        }
    }
}

pub(super) fn plain(key: u64, event: CmEventType, status: i32) -> CmEvent {
    CmEvent {
        event,
        id: CmIdKey(key),
        listen_id: None,
        new_id: None,
        status,
        conn: empty_conn(),
        ud: None,
    }
}

/// The parameters of an event that carries none.
pub(super) fn empty_conn() -> ConnParam {
    ConnParam {
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        ..ConnParam::default()
    }
}

/// The listener of a request, or None (then the request is turned away).
fn listener_of(ch: &ChannelInner, dev: usize, sid: u64) -> Option<Arc<IdInner>> {
    lock(&ch.listeners)
        .get(&(dev, sid))
        .and_then(|w| w.upgrade())
}

/// Turns away a request nobody here takes (REJ 28, as Linux's CMA does; SIDR: status 1).
fn turn_away(ch: &ChannelInner, dev: usize, comm: CommId, sidr: bool) {
    let Some(shared) = lock(&ch.devices).get(&dev).and_then(Weak::upgrade) else {
        return;
    };
    let mut d = shared.lock();
    let cm = d.engine.cm_mut();
    if sidr {
        let no = SidrReplyParams {
            status: 1,
            qpn: 0,
            qkey: 0,
            private_data: Vec::new(),
        };
        let _ = cm.sidr_reply(comm, &no);
    } else {
        let _ = cm.reject(comm, &[]);
    }
    shared.cm.unroute_conn(comm.0);
    shared.drive_through(&mut d);
}

/// The request's CMA header, if the listener's port space has one and it is sound, and
/// the listener takes its destination.
fn header_for(listener: &IdInner, data: &[u8]) -> Option<Option<CmaHeader>> {
    if !listener.ps.has_header() {
        return Some(None);
    }
    let h = CmaHeader::parse(data).ok()??;
    let bound = lock(&listener.st).src.map(|s| s.ip());
    route::takes(bound, h.dst).then_some(Some(h))
}

/// A new id for a request to `listener`, on its channel and device.
fn child(listener: &Arc<IdInner>, comm: CommId, peer: Gid, h: Option<CmaHeader>) -> EngineId {
    let ctx = &listener.ctx;
    let lst = lock(&listener.st);
    let port = lst.src.map_or(0, |s| s.port());
    let src = h.map(|h| SocketAddr::new(h.dst, port)).or(lst.src);
    drop(lst);
    let st = State {
        phase: Phase::Requested,
        src,
        dst: h.map(|h| SocketAddr::new(h.src, h.src_port)),
        peer: Some(peer),
        comm: Some(comm.0),
        seq_num: ctx.random_psn(),
        ack_timeout: ACK_TIMEOUT,
        mtu: Some(ctx.active_mtu()),
        secure: lock(&listener.st).secure,
        ..State::default()
    };
    let inner = Arc::new(IdInner {
        key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
        ctx: ctx.clone(),
        engine: listener.engine.clone(),
        dev: listener.dev,
        channel: Mutex::new(listener.channel()),
        ps: listener.ps,
        qp_type: listener.qp_type,
        st: Mutex::new(st),
    });
    let ch = listener.channel();
    lock(&ch.conns).insert((listener.dev, comm.0), Arc::downgrade(&inner));
    // The listener may have moved to another channel since the request was routed.
    listener.engine.shared().cm.route_conn(comm.0, &ch);
    EngineId { inner }
}

fn request(
    ch: &Arc<ChannelInner>,
    dev: usize,
    comm: CommId,
    peer: Gid,
    req: Req,
) -> Option<CmEvent> {
    let Some(listener) = listener_of(ch, dev, req.service_id) else {
        turn_away(ch, dev, comm, false);
        return None;
    };
    let Some(h) = header_for(&listener, &req.private_data) else {
        turn_away(ch, dev, comm, false);
        return None;
    };
    let new = child(&listener, comm, peer, h);
    let mut private_data = req.private_data;
    {
        let mut st = lock(&new.inner.st);
        // An oxrdma peer's offer is never the application's, answered or not.
        if new.inner.qp_type != QpType::Ud {
            let offer = keys::take(&mut private_data, keys::IN_REQ);
            st.peer_offer = offer.filter(|_| new.secure_mode(&st) != SecureMode::Off);
        }
        st.peer_qpn = req.local_qpn;
        st.peer_psn = req.starting_psn;
        // The passive side's view: its responder resources are the REQ's initiator depth.
        st.depths = Depths::of_request(req.responder_resources, req.initiator_depth);
        st.retry = req.retry_count;
        st.rnr_retry = req.rnr_retry_count;
        st.ack_timeout = req.primary.local_ack_timeout;
        let mtu = Mtu::from_ibv(u32::from(req.path_mtu)).unwrap_or(Mtu::Mtu1024);
        st.mtu = Some(mtu.min(new.inner.ctx.active_mtu()));
    }
    let skip = if h.is_some() { CmaHeader::LEN } else { 0 };
    Some(CmEvent {
        event: CmEventType::ConnectRequest,
        id: new.key(),
        listen_id: Some(CmIdKey(listener.key)),
        status: 0,
        conn: ConnParam {
            private_data: private_data[skip..].to_vec(),
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            flow_control: req.e2e_flow_control,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: req.srq,
            qp_num: req.local_qpn,
        },
        ud: None,
        new_id: Some(CmId::from_engine(new)),
    })
}

fn sidr_request(
    ch: &Arc<ChannelInner>,
    dev: usize,
    comm: CommId,
    peer: Gid,
    req: SidrReq,
) -> Option<CmEvent> {
    let Some(listener) = listener_of(ch, dev, req.service_id) else {
        turn_away(ch, dev, comm, true);
        return None;
    };
    let Some(h) = header_for(&listener, &req.private_data) else {
        turn_away(ch, dev, comm, true);
        return None;
    };
    let new = child(&listener, comm, peer, h);
    let skip = if h.is_some() { CmaHeader::LEN } else { 0 };
    let mut e = plain(new.inner.key, CmEventType::ConnectRequest, 0);
    e.listen_id = Some(CmIdKey(listener.key));
    e.ud = Some(UdParam {
        private_data: req.private_data[skip..].to_vec(),
        dgid: peer,
        qp_num: 0,
        qkey: 0,
    });
    e.new_id = Some(CmId::from_engine(new));
    Some(e)
}

impl EngineId {
    /// What an event of the device's CM does to this id (the machine's plan, carried
    /// out), and the event the application sees, if any.
    fn on_event(&self, kind: CmEventKind) -> Option<CmEvent> {
        let key = self.inner.key;
        let mut st = lock(&self.inner.st);
        let event = match &kind {
            CmEventKind::Reply { .. } => Event::Reply,
            CmEventKind::Established => Event::Established,
            CmEventKind::Rejected { reason, .. } => Event::Rejected {
                reason: i32::from(*reason),
            },
            CmEventKind::Unreachable => Event::Unreachable,
            CmEventKind::Disconnected { .. } => Event::Disconnected,
            CmEventKind::TimewaitExit => Event::TimewaitExit,
            CmEventKind::SidrReply { rep } => Event::SidrReply {
                status: i32::from(rep.status),
            },
            // Requests come to listeners, never to an id of theirs.
            CmEventKind::ConnectRequest { .. } | CmEventKind::SidrRequest { .. } => {
                return Some(plain(key, CmEventType::ConnectError, -22));
            }
        };
        let mut plan = machine::event(st.phase, event, st.qp.is_some());
        // What the event brings to the id and to the application's event.
        let (mut conn, mut ud) = (None, None);
        match kind {
            CmEventKind::Reply { rep } => conn = Some(self.take_reply(&mut st, &rep)),
            CmEventKind::Rejected { private_data, .. } => {
                conn = Some(ConnParam {
                    private_data,
                    ..empty_conn()
                })
            }
            CmEventKind::SidrReply { rep } if rep.status == 0 => {
                ud = Some(UdParam {
                    private_data: rep.private_data.to_vec(),
                    dgid: st.peer.unwrap_or_default(),
                    qp_num: rep.qpn,
                    qkey: rep.qkey,
                })
            }
            _ => {}
        }
        if let Err(errno) = self.take_qp_step(&st, &plan) {
            plan = machine::qp_failed(plan, st.phase, errno);
            let _ = self.take_qp_step(&st, &plan);
        }
        if plan.wire == Wire::Rtu {
            let shared = self.inner.engine.shared();
            let mut dev = shared.lock();
            let _ = dev
                .engine
                .cm_mut()
                .establish(CommId(st.comm.unwrap_or_default()));
            shared.drive_through(&mut dev);
        }
        st.follow(&plan);
        let (event, status) = plan.show?;
        let mut e = plain(key, event, status);
        if event != CmEventType::ConnectError {
            if let Some(c) = conn {
                e.conn = c;
            }
        }
        e.ud = ud;
        Some(e)
    }

    /// A REP's part for the id (the peer's QP and PSN, the depths), and what the
    /// application's event says of it.
    fn take_reply(&self, st: &mut State, rep: &Rep) -> ConnParam {
        let mut private_data = rep.private_data;
        if let Some((pair, qpn)) = st.offered.take() {
            self.take_answer(st, pair, qpn, &mut private_data);
        }
        st.peer_qpn = rep.local_qpn;
        st.peer_psn = rep.starting_psn;
        st.depths = st.depths.after_reply(rep.responder_resources);
        st.rnr_retry = rep.rnr_retry_count;
        ConnParam {
            private_data: private_data.to_vec(),
            responder_resources: rep.responder_resources,
            initiator_depth: rep.initiator_depth,
            flow_control: rep.e2e_flow_control,
            retry_count: st.retry,
            rnr_retry_count: rep.rnr_retry_count,
            srq: rep.srq,
            qp_num: rep.local_qpn,
        }
    }

    /// The peer's answer to this side's offer of keys for QP `qpn` (`keys`), taken from the
    /// REP's private data: what is agreed is recorded for the QP's moves. An answer that
    /// does not agree (another suite, a bad key) makes the QP refuse to be plain, as the
    /// peer's is secure.
    fn take_answer(&self, st: &State, pair: KeyPair, qpn: u32, private_data: &mut [u8]) {
        let Some((suite, public)) = keys::take(private_data, keys::IN_REP) else {
            return; // plain: the connection's record from `connect` stands
        };
        let require = self.secure_mode(st) == SecureMode::Require;
        let secret = (suite == pair.suite)
            .then(|| pair.agree(&public).ok())
            .flatten();
        let agreed = Agreed {
            suite,
            secret,
            require: require || secret.is_none(),
        };
        self.inner.engine.shared().agree(qpn, agreed);
    }
}

impl EngineChannel {
    /// The next event: waits for one unless the descriptor was made non-blocking
    /// (`Ok(None)` then, as `rdma_get_cm_event` fails with EAGAIN).
    pub fn get_event(&self) -> crate::error::Result<Option<CmEvent>> {
        loop {
            self.pull();
            let Some(raw) = self.inner.queue.wait()? else {
                return Ok(None);
            };
            if let Some(e) = take_event(&self.inner, raw) {
                return Ok(Some(e));
            }
        }
    }

    /// The next event if one waits.
    pub fn try_event(&self) -> Option<CmEvent> {
        self.pull();
        while let Some(raw) = self.inner.queue.pop() {
            if let Some(e) = take_event(&self.inner, raw) {
                return Some(e);
            }
        }
        None
    }
}
