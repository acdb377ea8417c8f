//! The RDMA connection manager (librdmacm's model): connect to an IP address and port,
//! listen on one, and get events (connection requests, established, rejected,
//! unreachable, disconnected, timewait exit) on a channel whose descriptor works with
//! poll, epoll or an async runtime. Connections are set up by the device's IBTA CM
//! (`oxrdma_core::cm`) with Linux's conventions (service IDs, the CMA header, PSNs), so
//! either side may be Linux's rdma_cm on rxe. Peers on this host are found through the
//! rendezvous (`rendezvous.rs`); others by their address.

mod backlog;
mod channel;
mod cm_id;
mod connection;
mod id;
mod incoming;
mod iwarp_id;
mod keys;
mod listener;
mod machine;
mod rendezvous;
mod route;
pub(crate) mod routes;
mod state;
mod steps;
mod turns;

pub use crate::secure::SecureMode;
pub use cm_id::{CmId, EventChannel};
pub use listener::{connect, Connection, Listener, Request, MAX_ACCEPT_DATA, MAX_CONNECT_DATA};
pub use steps::{Depths, QpMover, TooDeep, MAX_DEPTH};

use oxrdma_core::Gid;
use oxrdma_wire::cma;
/// The flow label Linux gives an IP connection from its two ports (the path record's).
pub use oxrdma_wire::cma::flow_label;

/// librdmacm's port spaces (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// Reliable connections, as TCP ports (`RDMA_PS_TCP`).
    Tcp,
    /// UD, resolved with SIDR (`RDMA_PS_UDP`).
    Udp,
    /// Either, by the QP type (`RDMA_PS_IB`): no CMA header in the private data.
    Ib,
    /// `RDMA_PS_IPOIB`.
    Ipoib,
}

impl PortSpace {
    /// The number the service ID carries.
    pub fn value(self) -> u16 {
        match self {
            PortSpace::Tcp => cma::PS_TCP,
            PortSpace::Udp => cma::PS_UDP,
            PortSpace::Ib => cma::PS_IB,
            PortSpace::Ipoib => cma::PS_IPOIB,
        }
    }

    /// The port space a number names, if any.
    pub fn from_value(v: u16) -> Option<PortSpace> {
        [
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::Ib,
            PortSpace::Ipoib,
        ]
        .into_iter()
        .find(|p| p.value() == v)
    }

    /// Whether REQs carry the 36-byte CMA header (IP-addressed port spaces).
    fn has_header(self) -> bool {
        self != PortSpace::Ib
    }
}

/// A fresh process-wide id key (engine and rdma-core ids share the sequence).
pub(crate) fn next_key() -> u64 {
    state::NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// `enum rdma_cm_event_type`, with its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CmEventType {
    /// The address resolved (`rdma_resolve_addr`).
    AddrResolved = 0,
    /// The address did not resolve.
    AddrError = 1,
    /// The route resolved (`rdma_resolve_route`).
    RouteResolved = 2,
    /// The route did not resolve.
    RouteError = 3,
    /// A peer asks to connect (to a listener; the new id is in the event).
    ConnectRequest = 4,
    /// The peer accepted; the caller moves its own QP and calls `establish`.
    ConnectResponse = 5,
    /// The connection failed while being made (its QP could not move).
    ConnectError = 6,
    /// The peer did not answer.
    Unreachable = 7,
    /// The peer rejected the connection (the reason is the status).
    Rejected = 8,
    /// The connection is up.
    Established = 9,
    /// The connection is down (a DREQ came or went).
    Disconnected = 10,
    /// The device went away.
    DeviceRemoval = 11,
    /// A multicast group was joined.
    MulticastJoin = 12,
    /// A multicast group could not be joined.
    MulticastError = 13,
    /// The address moved to another device.
    AddrChange = 14,
    /// The connection left timewait: its QP may be used again.
    TimewaitExit = 15,
}

impl CmEventType {
    /// The event type numbered `n` (librdmacm's numbers).
    pub(crate) fn from_raw(n: u32) -> Option<CmEventType> {
        use CmEventType::*;
        [
            AddrResolved,
            AddrError,
            RouteResolved,
            RouteError,
            ConnectRequest,
            ConnectResponse,
            ConnectError,
            Unreachable,
            Rejected,
            Established,
            Disconnected,
            DeviceRemoval,
            MulticastJoin,
            MulticastError,
            AddrChange,
            TimewaitExit,
        ]
        .into_iter()
        .find(|e| *e as u32 == n)
    }

    /// `rdma_event_str`'s name.
    pub fn name(self) -> &'static str {
        match self {
            CmEventType::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            CmEventType::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            CmEventType::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            CmEventType::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            CmEventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            CmEventType::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            CmEventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            CmEventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            CmEventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            CmEventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            CmEventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            CmEventType::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            CmEventType::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            CmEventType::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            CmEventType::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            CmEventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

/// `struct rdma_conn_param`: what a REQ or REP says of the QP, and the private data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// The private data (its room: 56 bytes in a REQ after the CMA header, 196 in a REP,
    /// 148 in a REJ; events carry it padded to that).
    pub private_data: Vec<u8>,
    /// READs and atomics this side answers at once.
    pub responder_resources: u8,
    /// READs and atomics this side issues at once.
    pub initiator_depth: u8,
    /// End-to-end flow control (credits).
    pub flow_control: bool,
    /// Transport retries before a WR fails (0-7).
    pub retry_count: u8,
    /// RNR retries (0-7; 7 is for ever).
    pub rnr_retry_count: u8,
    /// The QP takes its receives from a shared receive queue.
    pub srq: bool,
    /// The QPN (for a caller that brings no QP to `connect`/`accept`; the peer's in
    /// events).
    pub qp_num: u32,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: 0,
        }
    }
}

/// `struct rdma_ud_param`: where a UD peer is, after SIDR.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UdParam {
    /// The private data of the SIDR message.
    pub private_data: Vec<u8>,
    /// The address handle's destination GID (its device's address).
    pub dgid: Gid,
    /// The peer's UD QP.
    pub qp_num: u32,
    /// The Q_Key its datagrams take.
    pub qkey: u32,
}

/// A process-wide name of a [`CmId`] (events name the id they are about by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmIdKey(pub u64);

/// `struct rdma_cm_event`.
#[derive(Debug)]
pub struct CmEvent {
    /// What happened.
    pub event: CmEventType,
    /// The id the event is about: for `ConnectRequest`, the new one (in `new_id`).
    pub id: CmIdKey,
    /// For `ConnectRequest`: the listener.
    pub listen_id: Option<CmIdKey>,
    /// For `ConnectRequest`: the new connection's id, to accept or reject (dropping it
    /// rejects).
    pub new_id: Option<CmId>,
    /// 0, a REJ reason (`Rejected`), a SIDR status, or a negative errno (`-ETIMEDOUT`).
    pub status: i32,
    /// The connection's parameters and private data, as the peer's REQ, REP or REJ said.
    pub conn: ConnParam,
    /// UD connections (`RDMA_PS_UDP`): the peer's QP and Q_Key.
    pub ud: Option<UdParam>,
}

/// The Q_Key RDMA CM gives UD QPs of `RDMA_PS_UDP` (and multicast).
pub const UDP_QKEY: u32 = 0x0123_4567;
/// `-ETIMEDOUT`, the status of a connection that got no answer.
pub const ETIMEDOUT: i32 = -110;
