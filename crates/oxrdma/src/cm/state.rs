//! What an RDMA CM id and an event channel hold: the id's phase and connection state
//! behind its lock, the channel's queue and its maps from comm and service IDs to ids,
//! and the QP attributes a state gives (`rdma_init_qp_attr`). The calls on them are in
//! `id.rs` and `connection.rs`; events are taken in `incoming.rs`.

use super::keys::KeyPair;
pub(super) use super::machine::Phase;
use super::machine::Plan;
use super::rendezvous::Registration;
use super::routes::EventSink;
use super::steps::{Depths, QpMover};
use super::{CmEventType, PortSpace, UDP_QKEY};
use crate::context::Context;
use crate::engine_context::EngineContext;
use crate::error::{Error, Result};
use crate::fdqueue::FdQueue;
use crate::lock::lock;
use crate::secure::SecureMode;
use crate::shared::Shared;
use oxrdma_core::cm::CmEvent as CoreEvent;
use oxrdma_core::secure::Suite;
use oxrdma_core::{Access, AddressVector, Gid, Mtu, QpAttr, QpState, QpType};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

/// An id's state, behind its lock.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) phase: Phase,
    pub(super) src: Option<SocketAddr>,
    pub(super) dst: Option<SocketAddr>,
    /// The peer's device (where the REQ went, or where it came from).
    pub(super) peer: Option<Gid>,
    pub(super) comm: Option<u32>,
    pub(super) qp: Option<u32>,
    /// How the attached QP is moved, if not through the engine (`attach_qp_with`).
    pub(super) mover: Option<Arc<dyn QpMover>>,
    /// The PSN this side receives with (the peer sends from it).
    pub(super) seq_num: u32,
    pub(super) listen: Option<(u64, Option<Registration>)>,
    /// From the peer's REQ or REP.
    pub(super) peer_qpn: u32,
    pub(super) peer_psn: u32,
    /// The connection's parameters, as they stand for the QP.
    pub(super) depths: Depths,
    pub(super) retry: u8,
    pub(super) rnr_retry: u8,
    pub(super) ack_timeout: u8,
    pub(super) mtu: Option<Mtu>,
    /// How the connection is secured (None: `OXRDMA_SECURE`; a request's id takes its
    /// listener's).
    pub(super) secure: Option<SecureMode>,
    /// Active: the key pair offered in the REQ and the QP it is for, until the REP.
    pub(super) offered: Option<(KeyPair, u32)>,
    /// Passive: the suite and public key the REQ offered, until accept.
    pub(super) peer_offer: Option<(Suite, [u8; 32])>,
}

impl State {
    /// The id's state after `plan`: its phase, and its connection forgotten if over.
    /// (The QP's step and the wire's are the caller's, each in its place.)
    pub(super) fn follow(&mut self, plan: &Plan) {
        self.phase = plan.next;
        if plan.forget {
            self.comm = None;
        }
    }
}

#[derive(Debug)]
pub(crate) struct IdInner {
    pub(super) key: u64,
    pub(super) ctx: Context,
    /// The engine of `ctx` (the RDMA CM is the engine's).
    pub(super) engine: EngineContext,
    pub(super) dev: usize,
    /// The channel its events go to (`migrate` changes it).
    pub(super) channel: Mutex<Arc<ChannelInner>>,
    pub(super) ps: PortSpace,
    pub(super) qp_type: QpType,
    pub(super) st: Mutex<State>,
}

/// An RDMA CM id of an engine device: bind, resolve, connect or listen, accept; its events come on its
/// channel. Dropping it destroys it (`rdma_destroy_id`): a connection is disconnected, a
/// request rejected, a listener's port freed.
#[derive(Debug, Clone)]
pub(crate) struct EngineId {
    pub(super) inner: Arc<IdInner>,
}

pub(super) static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// The local ACK timeout of RoCE paths (Linux: `cm_ack_timeout(15, 18)`).
pub(super) const ACK_TIMEOUT: u8 = 19;
/// Ephemeral ports, as Linux's `ip_local_port_range`.
pub(super) const EPHEMERAL: std::ops::Range<u32> = 32768..61000;

pub(super) fn einval(what: &'static str) -> Error {
    Error::CmState(what)
}

pub(super) fn errno(e: rustix::io::Errno) -> Error {
    Error::Io(std::io::Error::from_raw_os_error(e.raw_os_error()))
}

pub(super) fn dev_key(ctx: &EngineContext) -> usize {
    Arc::as_ptr(&ctx.inner.shared) as usize
}

impl IdInner {
    /// The device GID the id's connection comes from, and its index in the table: its
    /// local address's, if the device has it (a device on an interface has several),
    /// else the device's main GID.
    pub(super) fn local_gid(&self, st: &State) -> (Gid, u8) {
        let gids = self.ctx.gids();
        let at = st
            .src
            .and_then(|s| gids.iter().position(|&g| g == Gid::from(s.ip())));
        let main = self.ctx.gid();
        let at = at
            .or_else(|| gids.iter().position(|&g| g == main))
            .unwrap_or(0);
        (gids.get(at).copied().unwrap_or(main), at as u8)
    }

    /// The channel its events go to now.
    pub(super) fn channel(&self) -> Arc<ChannelInner> {
        lock(&self.channel).clone()
    }
}

/// What waits in a channel.
#[derive(Debug)]
pub(crate) enum Raw {
    /// An event of a device's CM (`dev`: the device's key).
    Core { dev: usize, event: CoreEvent },
    /// An event made here (address and route resolution).
    Local {
        id: Weak<IdInner>,
        event: CmEventType,
        status: i32,
    },
    /// What befell an id that makes its own events (an iWARP id's: `iwarp_id.rs`).
    Own(Box<dyn OwnEvent>),
}

/// An event an id makes itself (`Raw::Own`), carried through the CM's machine when the
/// application takes it, as the device CM's are.
pub(crate) trait OwnEvent: Send + std::fmt::Debug {
    /// Whether it is for the id with key `key` (`rdma_migrate_id` moves it with that id).
    fn is_for(&self, key: u64) -> bool;
    /// The application's event, the id moved on; None if the id is gone.
    fn take(self: Box<Self>) -> Option<super::CmEvent>;
}

#[derive(Debug)]
pub(crate) struct ChannelInner {
    pub queue: FdQueue<Raw>,
    /// The ids of this channel by device and comm ID, and listeners by device and service
    /// ID (found when their events are taken).
    pub conns: Mutex<HashMap<(usize, u32), Weak<IdInner>>>,
    pub listeners: Mutex<HashMap<(usize, u64), Weak<IdInner>>>,
    /// The devices its ids are on, by key (weak: a channel does not keep a device open,
    /// and what drops a channel never closes one).
    pub devices: Mutex<HashMap<usize, Weak<Shared>>>,
}

impl EventSink for ChannelInner {
    fn queue_core(&self, dev: usize, event: CoreEvent) {
        self.queue.push(Raw::Core { dev, event });
    }
}

/// What `rdma_init_qp_attr` gives for `state`, as Linux's CM does.
pub(super) fn qp_attr(
    st: &State,
    t: QpType,
    ps: PortSpace,
    state: QpState,
    sgid_index: u8,
) -> Result<QpAttr> {
    let rc = t == QpType::Rc;
    let rc_only = |v| if rc { Some(v) } else { None };
    Ok(match state {
        QpState::Init if t == QpType::Ud => QpAttr {
            qp_state: Some(state),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(if ps == PortSpace::Udp { UDP_QKEY } else { 0 }),
            ..QpAttr::default()
        },
        QpState::Init => {
            let mut access = Access::REMOTE_WRITE;
            if st.depths.responder_resources > 0 && st.comm.is_some() {
                access = access
                    .union(Access::REMOTE_READ)
                    .union(Access::REMOTE_ATOMIC);
            }
            QpAttr {
                qp_state: Some(state),
                pkey_index: Some(0),
                port_num: Some(1),
                qp_access_flags: Some(if st.comm.is_some() {
                    access
                } else {
                    Access::empty()
                }),
                ..QpAttr::default()
            }
        }
        QpState::Rtr if t == QpType::Ud => QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        },
        QpState::Rtr => {
            let peer = st.peer.ok_or(einval("no connection yet"))?;
            QpAttr {
                qp_state: Some(state),
                ah_attr: Some(AddressVector {
                    dgid: peer,
                    sgid_index,
                }),
                path_mtu: Some(st.mtu.unwrap_or(Mtu::Mtu1024)),
                dest_qp_num: Some(st.peer_qpn),
                rq_psn: Some(st.seq_num),
                max_dest_rd_atomic: rc_only(st.depths.responder_resources),
                min_rnr_timer: rc_only(0),
                ..QpAttr::default()
            }
        }
        QpState::Rts if t == QpType::Ud => QpAttr {
            qp_state: Some(state),
            sq_psn: Some(0),
            ..QpAttr::default()
        },
        QpState::Rts => QpAttr {
            qp_state: Some(state),
            sq_psn: Some(st.peer_psn),
            timeout: rc_only(st.ack_timeout),
            retry_cnt: rc_only(st.retry),
            rnr_retry: rc_only(st.rnr_retry),
            max_rd_atomic: rc_only(st.depths.initiator_depth),
            ..QpAttr::default()
        },
        _ => return Err(einval("init_qp_attr is for INIT, RTR and RTS")),
    })
}
