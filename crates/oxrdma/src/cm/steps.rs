//! The connection's decisions, without I/O, kept once for the Rust API's ids and the C
//! library's (`oxrdma-ibverbs`, which drives these ids): the read depths each side settles
//! on (librdmacm's rules), and the moves of the QP attached to an id, which each carries
//! out its own way ([`QpMover`]: through the engine, or through the C library's
//! `ibv_modify_qp` so the program's `struct ibv_qp` follows).
//!
//! After a REP, an attached QP goes to RTR and RTS and the RTU goes out; if a move fails,
//! the QP goes to ERR, the application sees `CONNECT_ERROR` with the move's errno, and
//! nothing goes on the wire then: the REJ goes out when the id is destroyed. That is
//! librdmacm's way (Linux's CM sends REJ 28 for an id destroyed with a REP unanswered),
//! and a REJECTED or DISCONNECTED that follows is not shown.

use oxrdma_core::{QpAttr, QpState};

/// librdmacm's `RDMA_MAX_RESP_RES` and `RDMA_MAX_INIT_DEPTH`: as deep as the device (and,
/// for `accept`, the request) allows.
pub const MAX_DEPTH: u8 = 0xff;

/// The moves that make an attached QP ready on `accept` or a REP.
pub(super) const TO_RTS: [QpState; 3] = [QpState::Init, QpState::Rtr, QpState::Rts];

/// Moves the QP attached to an id ([`super::CmId::attach_qp_with`]).
pub trait QpMover: Send + Sync + std::fmt::Debug {
    /// Modifies the QP as `attr` says; an errno on failure.
    fn modify(&self, attr: &QpAttr) -> Result<(), i32>;
}

/// A connection's read limits: the READs and atomics this side answers at once
/// (responder resources) and issues at once (initiator depth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Depths {
    /// READs and atomics answered at once.
    pub responder_resources: u8,
    /// READs and atomics issued at once.
    pub initiator_depth: u8,
}

/// Depths the caller asked for that the port space refuses (`EINVAL` from `rdma_connect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep;

impl Depths {
    /// `rdma_connect`'s: the caller's, [`MAX_DEPTH`] being the device's most; over TCP's
    /// port space, more than the device has is refused.
    pub fn connect(asked: Depths, device_max: u8, tcp: bool) -> Result<Depths, TooDeep> {
        let pick = |v: u8| if v == MAX_DEPTH { device_max } else { v };
        let d = Depths {
            responder_resources: pick(asked.responder_resources),
            initiator_depth: pick(asked.initiator_depth),
        };
        if tcp && (d.responder_resources > device_max || d.initiator_depth > device_max) {
            return Err(TooDeep);
        }
        Ok(d)
    }

    /// The passive side's view of a REQ: it answers as many reads as the peer issues,
    /// and issues no more than the peer answers.
    pub fn of_request(req_responder_resources: u8, req_initiator_depth: u8) -> Depths {
        Depths {
            responder_resources: req_initiator_depth,
            initiator_depth: req_responder_resources,
        }
    }

    /// `rdma_accept`'s, from the request's view ([`Self::of_request`]): the caller's
    /// values as given, [`MAX_DEPTH`] the request's within the device.
    pub fn accept(self, asked: Depths, device_max: u8) -> Depths {
        let pick = |v: u8, req: u8| {
            if v == MAX_DEPTH {
                req.min(device_max)
            } else {
                v
            }
        };
        Depths {
            responder_resources: pick(asked.responder_resources, self.responder_resources),
            initiator_depth: pick(asked.initiator_depth, self.initiator_depth),
        }
    }

    /// The active side's after the REP: it issues no more reads than the passive side
    /// answers.
    pub fn after_reply(self, rep_responder_resources: u8) -> Depths {
        Depths {
            initiator_depth: self.initiator_depth.min(rep_responder_resources),
            ..self
        }
    }
}

/// The attributes that move a QP to ERR.
pub(super) fn to_err() -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Err),
        ..QpAttr::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(responder_resources: u8, initiator_depth: u8) -> Depths {
        Depths {
            responder_resources,
            initiator_depth,
        }
    }

    #[test]
    fn connect_takes_the_callers_depths_and_the_devices_for_max() {
        assert_eq!(Depths::connect(d(2, 3), 16, true), Ok(d(2, 3)));
        assert_eq!(Depths::connect(d(MAX_DEPTH, 3), 16, true), Ok(d(16, 3)));
        assert_eq!(
            Depths::connect(d(MAX_DEPTH, MAX_DEPTH), 16, false),
            Ok(d(16, 16))
        );
        // More than the device has: refused over TCP's port space, kept elsewhere.
        assert_eq!(Depths::connect(d(17, 1), 16, true), Err(TooDeep));
        assert_eq!(Depths::connect(d(17, 1), 16, false), Ok(d(17, 1)));
    }

    #[test]
    fn accept_takes_the_callers_depths_or_the_requests_within_the_device() {
        // The peer issues 4 reads and answers 8.
        let req = Depths::of_request(8, 4);
        assert_eq!(req, d(4, 8));
        assert_eq!(req.accept(d(MAX_DEPTH, MAX_DEPTH), 16), d(4, 8));
        assert_eq!(req.accept(d(MAX_DEPTH, MAX_DEPTH), 2), d(2, 2));
        // As librdmacm: a value given is used as it is.
        assert_eq!(req.accept(d(1, 12), 16), d(1, 12));
    }

    #[test]
    fn after_a_reply_the_active_side_issues_no_more_than_the_peer_answers() {
        assert_eq!(d(5, 8).after_reply(3), d(5, 3));
        assert_eq!(d(5, 2).after_reply(3), d(5, 2));
    }
}
