//! One connection's state in the CM, and the IBA timeout encoding.

use crate::gid::Gid;
use crate::Nanos;
use oxrdma_wire::mad::MAD_LEN;

/// IBA chapter 12's connection states, as far as RDMA CM uses them. The MRA states are
/// folded in: after a CONNECT_REQUEST or a REP is handed up, Linux's RDMA CM arms a
/// delayed MRA, so a repeated REQ (in `ReqRcvd`) or REP (in `RepRcvd`) is answered with
/// an MRA; that is all MRA_REQ_SENT and MRA_REP_SENT change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Active: REQ sent, waiting for REP (or REJ, MRA).
    ReqSent,
    /// Passive: REQ handed up, waiting for the user's accept or reject.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP handed up, waiting for the user to establish (send RTU).
    RepRcvd,
    Established,
    /// Our DREQ is out, waiting for DREP.
    DreqSent,
    /// The peer's DREQ came; waiting for the user to disconnect (send DREP).
    DreqRcvd,
    /// Disconnected; stale messages are still answered until the time is up.
    TimeWait,
    /// Active UD: SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// Passive UD: SIDR_REQ handed up, waiting for the user's reply.
    SidrReqRcvd,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub state: State,
    pub peer: Gid,
    /// The peer's comm ID (0 until its REP or REQ names it); for SIDR the request ID.
    pub remote_id: u32,
    /// The peer's QPN (DREQ carries it).
    pub remote_qpn: u32,
    /// The transaction of the REQ (or SIDR_REQ): REP, RTU, REJ and MRA reuse it.
    pub tid: u64,
    /// The MAD to send again: the request being timed (REQ, REP, DREQ, SIDR_REQ), or the
    /// last answer (RTU, DREP) for a repeated request.
    pub last: Box<[u8; MAD_LEN]>,
    /// Resends left for the request being timed.
    pub retries: u8,
    /// How long to wait for each answer, and how many times to send again.
    pub timeout: Nanos,
    pub max_retries: u8,
    /// The local ACK timeout of the connection's QPs (timewait and MRA extensions).
    pub ack_timeout: u8,
    pub deadline: Option<Nanos>,
    /// Destroyed by the user: the CM finishes the protocol but hands up no more events.
    pub detached: bool,
    /// Passive and not yet answered: counts against this listener's backlog.
    pub pending_on: Option<u64>,
    /// A passive connection that counts against its peer's limits (`Cm::peer_counts`).
    pub counted: bool,
    /// DISCONNECTED was handed up (once per connection).
    pub disconnected: bool,
    /// When the first REQ went (for `CmConfig::listen_grace`).
    pub first_sent: Nanos,
}

/// IBA's 4.096 µs × 2^t, as Linux approximates it: 2^(t−8) ms.
pub(super) fn iba_time(t: u8) -> Nanos {
    (1u64 << u32::from(t.min(31)).saturating_sub(8)) * 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iba_times_match_linux() {
        // The REQ timeout of the captures: 2 × packet life 18 + response timeout 20.
        assert_eq!(2 * iba_time(18) + iba_time(20), 6_144_000_000);
        assert_eq!(iba_time(19), 2_048_000_000);
        assert_eq!(iba_time(3), 1_000_000);
        assert_eq!(iba_time(24), 65_536_000_000);
    }
}
