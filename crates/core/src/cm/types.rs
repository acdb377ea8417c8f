//! What the connection manager takes from its user and hands back: connection parameters,
//! events, errors.

use crate::gid::Gid;
use crate::verbs::Mtu;
use oxrdma_wire::cm::{Rep, Req, SidrRep, SidrReq};

/// A connection (or SIDR exchange) as the CM knows it: its local comm ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// The transport a REQ asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmTransport {
    /// Reliable connection (RC).
    Rc,
    /// Unreliable connection (UC).
    Uc,
}

/// What the active side's REQ says about its QP and path (`rdma_connect`'s conn_param and
/// the resolved route). The CM adds its own fields: comm ID, CA GUID, timeouts, retries,
/// P_Key, LIDs and GIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The passive side's GID (the primary path's remote GID).
    pub dest: Gid,
    /// The device GID the connection is made from (the REQ's primary path says it: the
    /// peer sends there).
    pub source: Gid,
    /// The service ID the passive side listens on (for the RDMA CM: port space and port).
    pub service_id: u64,
    /// RC or UC.
    pub transport: CmTransport,
    /// The active side's QP number (24 bits).
    pub qpn: u32,
    /// The PSN the passive side will send with (its receive PSN is ours to pick).
    pub starting_psn: u32,
    /// Incoming RDMA READ/atomic requests the active side's QP handles at once (its
    /// `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the active side's QP keeps outstanding (its
    /// `max_rd_atomic`).
    pub initiator_depth: u8,
    /// The REQ's end-to-end flow control bit.
    pub flow_control: bool,
    /// Retry count for transport errors the REQ announces (0-7).
    pub retry_count: u8,
    /// RNR retry count the REQ announces (0-7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// The active side's QP takes its receives from an SRQ (the REQ's SRQ bit).
    pub srq: bool,
    /// Path MTU of the connection.
    pub path_mtu: Mtu,
    /// The primary path's flow label (20 bits) and traffic class.
    pub flow_label: u32,
    /// The primary path's traffic class (RoCEv2: the IP header's TOS byte).
    pub traffic_class: u8,
    /// The primary path's hop limit (RoCEv2: the IP TTL).
    pub hop_limit: u8,
    /// The QPs' local ACK timeout (4.096 µs × 2^t).
    pub ack_timeout: u8,
    /// Up to 92 bytes (the RDMA CM's 36-byte header included); the rest is zero.
    pub private_data: Vec<u8>,
}

/// What the passive side's REP says (`rdma_accept`'s conn_param).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// The passive side's QP number (24 bits).
    pub qpn: u32,
    /// The PSN the active side will send with.
    pub starting_psn: u32,
    /// Incoming RDMA READ/atomic requests the passive side's QP handles at once (its
    /// `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the passive side's QP keeps outstanding (its
    /// `max_rd_atomic`).
    pub initiator_depth: u8,
    /// The REP's end-to-end flow control bit.
    pub flow_control: bool,
    /// RNR retry count the REP announces (0-7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// The passive side's QP takes its receives from an SRQ (the REP's SRQ bit).
    pub srq: bool,
    /// Up to 196 bytes.
    pub private_data: Vec<u8>,
}

/// A SIDR reply (`rdma_accept` or `rdma_reject` of a UD connection request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// 0 valid, 1 service ID not supported, 2 rejected, 3 no QP.
    pub status: u8,
    /// The UD QP the requester is to send to.
    pub qpn: u32,
    /// That QP's Q_Key.
    pub qkey: u32,
    /// Up to 136 bytes.
    pub private_data: Vec<u8>,
}

/// What happened to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEventKind {
    /// Passive: a REQ for a listened service ID made a new connection; accept or reject it.
    ConnectRequest {
        /// The active side's GID.
        peer: Gid,
        /// The REQ as received.
        req: Box<Req>,
    },
    /// Active: the REP came; bring the QP to RTS, then `establish` (sends the RTU).
    Reply {
        /// The REP as received.
        rep: Box<Rep>,
    },
    /// Passive: the RTU came (or the QP saw the first packet, `notify_established`).
    Established,
    /// The peer rejected the REQ or REP: its reason and private data (148 bytes).
    Rejected {
        /// The REJ's reason code (28: consumer reject, as `rdma_reject` sends).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// No answer within the retries (REQ, REP or SIDR_REQ).
    Unreachable,
    /// The connection ended: a DREQ came, or the DREP to ours (or no DREP within the
    /// retries, `timed_out`).
    Disconnected {
        /// Our DREQ went unanswered through its retries.
        timed_out: bool,
    },
    /// The connection left timewait: its comm ID and QP may be used again.
    TimewaitExit,
    /// Passive: a SIDR_REQ for a listened service ID; answer with `sidr_reply`.
    SidrRequest {
        /// The requester's GID.
        peer: Gid,
        /// The SIDR_REQ as received.
        req: Box<SidrReq>,
    },
    /// Active: the SIDR_REP came (its status says whether the QPN is good).
    SidrReply {
        /// The SIDR_REP as received.
        rep: Box<SidrRep>,
    },
}

/// An event of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    /// The connection (or SIDR exchange) the event concerns.
    pub id: CmId,
    /// What happened.
    pub kind: CmEventKind,
}

/// Why a CM call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No connection has this ID.
    #[error("no such connection")]
    UnknownId,
    /// The connection is in a state where this call does not apply.
    #[error("the connection is not in a state that allows this")]
    InvalidState,
    /// The private data does not fit the message.
    #[error("private data longer than the message holds ({max} bytes)")]
    PrivateDataTooLong {
        /// The most private data the message holds, in bytes.
        max: usize,
    },
    /// Someone already listens on the service ID.
    #[error("the service ID is listened on already")]
    InUse,
}

/// Why a received MAD was ignored (counted in [`CmStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmDrop {
    /// Not a CM Send MAD of class version 2, or too short.
    Malformed,
    /// Names a comm ID we do not have, or comes from another peer than the connection's.
    UnknownId,
    /// The connection is in a state that takes no such message.
    State,
    /// A listener's backlog of unanswered requests is full (the peer will retry).
    Backlog,
    /// The peer has as many unanswered requests as `CmConfig::pending_per_peer` allows (it
    /// will retry).
    PeerPending,
    /// The peer has as many connections as `CmConfig::conns_per_peer` allows (rejected
    /// with "no resources").
    PeerConnections,
    /// LAP, APR or an attribute the CM does not define.
    Unsupported,
}

/// Counters of the CM's MADs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    /// CM MADs received.
    pub received: u64,
    /// CM MADs sent, resends included.
    pub sent: u64,
    /// MADs sent again because their answer did not come in time.
    pub retransmitted: u64,
    /// Received MADs that were dropped (see [`CmDrop`]).
    pub ignored: u64,
    /// Of those: requests a listener's full backlog turned away.
    pub backlog_full: u64,
    /// Of those: requests beyond their peer's limits (`CmConfig::pending_per_peer`,
    /// `conns_per_peer`).
    pub peer_limited: u64,
}
