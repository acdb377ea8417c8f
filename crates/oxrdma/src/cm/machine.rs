//! An RDMA CM id's life as a value: the phase it is in, and for each call of the
//! application and each event of the device's CM about its connection, the next phase and
//! the steps to carry out: the attached QP's moves, what goes on the wire, what the
//! application is shown. No lock, device or I/O here: `id.rs`, `connection.rs` and
//! `incoming.rs` carry the plans out, and the C library drives these same ids (its
//! program's QP moved through a `QpMover`), so one machine serves both. The rules are
//! librdmacm's, and Linux's CM's for what goes on the wire.

use super::{CmEventType, ETIMEDOUT};

/// Where an id is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Phase {
    #[default]
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active: REQ (or SIDR_REQ) out.
    Connecting,
    /// Active, no QP: the REP came; `establish` sends the RTU.
    Replied,
    /// Active: the REP came and the attached QP could not take it (CONNECT_ERROR shown);
    /// the REJ goes out when the id is destroyed.
    ConnectError,
    /// Passive: a request handed up, waiting for accept or reject.
    Requested,
    /// Passive: REP out, waiting for the RTU.
    Accepted,
    Connected,
    Disconnected,
    /// Rejected, unreachable, or out of timewait.
    Done,
}

/// What the application asks of an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    Bind,
    ResolveAddr,
    ResolveRoute,
    Listen,
    Connect,
    Accept,
    Reject,
    Establish,
    Disconnect,
}

/// An event of the device's CM about an id's connection, as far as the machine looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    Reply,
    Established,
    Rejected {
        reason: i32,
    },
    Unreachable,
    /// The connection failed otherwise (an iWARP id's MPA exchange: the kernel's CM
    /// shows CONNECT_ERROR with the errno); `status` is the negative errno.
    ConnectError {
        status: i32,
    },
    Disconnected,
    TimewaitExit,
    SidrReply {
        status: i32,
    },
}

/// What happens to the attached QP (nothing where none is attached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QpStep {
    Keep,
    /// INIT, RTR and RTS with the connection's attributes (`steps::TO_RTS`).
    ToRts,
    ToErr,
}

/// What goes on the wire; the device's CM builds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wire {
    Nothing,
    /// REQ, or for UD the SIDR_REQ.
    Req,
    Rep,
    /// REJ, or for UD a SIDR_REP that refuses.
    Rej,
    SidrRep,
    Rtu,
    /// DREQ, or the DREP to the peer's.
    Dreq,
}

/// The steps of one call or event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    pub next: Phase,
    pub qp: QpStep,
    pub wire: Wire,
    /// The event the application is shown, and its status.
    pub show: Option<(CmEventType, i32)>,
    /// The connection (its comm ID) is over for this id: no more of its events come.
    pub forget: bool,
}

impl Plan {
    fn to(next: Phase) -> Plan {
        Plan {
            next,
            qp: QpStep::Keep,
            wire: Wire::Nothing,
            show: None,
            forget: false,
        }
    }

    fn qp(self, qp: QpStep) -> Plan {
        Plan { qp, ..self }
    }

    fn wire(self, wire: Wire) -> Plan {
        Plan { wire, ..self }
    }

    fn show(self, event: CmEventType, status: i32) -> Plan {
        Plan {
            show: Some((event, status)),
            ..self
        }
    }

    fn forget(self) -> Plan {
        Plan {
            forget: true,
            ..self
        }
    }
}

/// The plan for `call` in `phase`, or why the call is refused (`EINVAL`). `ud`: the id's
/// connection is SIDR's; `qp`: a QP is attached.
pub(super) fn call(phase: Phase, call: Call, ud: bool, qp: bool) -> Result<Plan, &'static str> {
    use Phase::*;
    let qp_to = |step| if qp { step } else { QpStep::Keep };
    Ok(match (call, phase) {
        (Call::Bind, Idle) => Plan::to(Bound),
        (Call::Bind, _) => return Err("bind of an id already bound"),
        // Resolution and listening show their own events (`id.rs`).
        (Call::ResolveAddr, Idle | Bound) => Plan::to(AddrResolved),
        (Call::ResolveAddr, _) => return Err("resolve_addr of an id in use"),
        (Call::ResolveRoute, AddrResolved) => Plan::to(RouteResolved),
        (Call::ResolveRoute, _) => return Err("resolve_route before the address is resolved"),
        (Call::Listen, Idle | Bound) => Plan::to(Listening),
        (Call::Listen, _) => return Err("listen on an id in use"),
        (Call::Connect, RouteResolved) => Plan::to(Connecting).wire(Wire::Req),
        (Call::Connect, _) => return Err("connect before the route is resolved"),
        (Call::Accept, Requested) if ud => Plan::to(Connected).wire(Wire::SidrRep).forget(),
        (Call::Accept, Requested) => Plan::to(Accepted).qp(qp_to(QpStep::ToRts)).wire(Wire::Rep),
        (Call::Accept, _) => return Err("accept without a connection request"),
        (Call::Reject, Requested | Replied) => Plan::to(Done).wire(Wire::Rej).forget(),
        (Call::Reject, _) => return Err("reject without a request or reply"),
        (Call::Establish, Replied) => Plan::to(Connected).wire(Wire::Rtu),
        (Call::Establish, _) => return Err("establish without a connect response"),
        (Call::Disconnect, Connected | Accepted | Disconnected) => Plan::to(Disconnected)
            .qp(qp_to(QpStep::ToErr))
            .wire(if ud { Wire::Nothing } else { Wire::Dreq }),
        (Call::Disconnect, _) => return Err("disconnect of an id not connected"),
    })
}

/// The plan for an event of the device's CM about the id's connection. `qp`: a QP is
/// attached.
pub(super) fn event(phase: Phase, event: Event, qp: bool) -> Plan {
    use Phase::*;
    let qp_to = |step| if qp { step } else { QpStep::Keep };
    if phase == ConnectError {
        // Nothing more is shown: the end of the connection (a REJ or a DREQ of the
        // peer's, which librdmacm hides) or anything else.
        return Plan::to(Done).forget();
    }
    match event {
        // librdmacm: with a QP, RTR and RTS and the RTU, and ESTABLISHED; without, the
        // caller moves its own and calls `establish`.
        Event::Reply if qp => Plan::to(Connected)
            .qp(QpStep::ToRts)
            .wire(Wire::Rtu)
            .show(CmEventType::Established, 0),
        Event::Reply => Plan::to(Replied).show(CmEventType::ConnectResponse, 0),
        Event::Established => Plan::to(Connected).show(CmEventType::Established, 0),
        // As librdmacm: only a rejection moves the QP to ERR; after UNREACHABLE or
        // DISCONNECTED it stays until the application disconnects or destroys the id.
        Event::Rejected { reason } => Plan::to(Done)
            .qp(qp_to(QpStep::ToErr))
            .show(CmEventType::Rejected, reason)
            .forget(),
        Event::Unreachable => Plan::to(Done)
            .show(CmEventType::Unreachable, ETIMEDOUT)
            .forget(),
        Event::ConnectError { status } => Plan::to(Done)
            .show(CmEventType::ConnectError, status)
            .forget(),
        Event::Disconnected => Plan::to(Disconnected).show(CmEventType::Disconnected, 0),
        Event::TimewaitExit => Plan::to(Done).show(CmEventType::TimewaitExit, 0).forget(),
        Event::SidrReply { status: 0 } => Plan::to(Connected)
            .show(CmEventType::Established, 0)
            .forget(),
        Event::SidrReply { status } => Plan::to(Done)
            .show(CmEventType::Unreachable, status)
            .forget(),
    }
}

/// What `plan` becomes when the attached QP could not take its moves to RTS (`errno`):
/// the QP to ERR, nothing on the wire. After a REP: CONNECT_ERROR, and the REJ waits
/// for the id's destruction (librdmacm's way); on `accept`: the call fails and the
/// request stays to be rejected.
pub(super) fn qp_failed(plan: Plan, phase: Phase, errno: i32) -> Plan {
    debug_assert_eq!(plan.qp, QpStep::ToRts);
    let failed = Plan {
        qp: QpStep::ToErr,
        wire: Wire::Nothing,
        ..plan
    };
    match phase {
        Phase::Requested => Plan {
            next: Phase::Requested,
            show: None,
            ..failed
        },
        _ => Plan {
            next: Phase::ConnectError,
            show: Some((CmEventType::ConnectError, -errno)),
            forget: false,
            ..failed
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CALLS: [Call; 9] = [
        Call::Bind,
        Call::ResolveAddr,
        Call::ResolveRoute,
        Call::Listen,
        Call::Connect,
        Call::Accept,
        Call::Reject,
        Call::Establish,
        Call::Disconnect,
    ];

    fn events() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Reply),
            Just(Event::Established),
            (1..40i32).prop_map(|reason| Event::Rejected { reason }),
            Just(Event::Unreachable),
            (-120..-1i32).prop_map(|status| Event::ConnectError { status }),
            Just(Event::Disconnected),
            Just(Event::TimewaitExit),
            (0..3i32).prop_map(|status| Event::SidrReply { status }),
        ]
    }

    #[test]
    fn an_active_connection_from_resolution_to_timewait() {
        let mut p = Phase::Idle;
        for c in [Call::ResolveAddr, Call::ResolveRoute, Call::Connect] {
            p = call(p, c, false, true).unwrap().next;
        }
        let rep = event(p, Event::Reply, true);
        assert_eq!((rep.qp, rep.wire), (QpStep::ToRts, Wire::Rtu));
        assert_eq!(rep.show, Some((CmEventType::Established, 0)));
        let d = call(rep.next, Call::Disconnect, false, true).unwrap();
        assert_eq!((d.qp, d.wire), (QpStep::ToErr, Wire::Dreq));
        let end = event(d.next, Event::TimewaitExit, true);
        assert!(end.forget && end.next == Phase::Done);
    }

    #[test]
    fn a_rep_the_qp_cannot_take_is_connect_error_and_hides_the_end() {
        let rep = event(Phase::Connecting, Event::Reply, true);
        let failed = qp_failed(rep, Phase::Connecting, 22);
        assert_eq!((failed.qp, failed.wire), (QpStep::ToErr, Wire::Nothing));
        assert_eq!(failed.show, Some((CmEventType::ConnectError, -22)));
        assert_eq!(failed.next, Phase::ConnectError);
        assert!(!failed.forget, "the REJ goes out when the id is destroyed");
        for e in [Event::Rejected { reason: 28 }, Event::Disconnected] {
            assert_eq!(event(failed.next, e, true).show, None);
        }
    }

    #[test]
    fn an_accept_the_qp_cannot_take_sends_nothing_and_leaves_the_request() {
        let a = call(Phase::Requested, Call::Accept, false, true).unwrap();
        assert_eq!((a.qp, a.wire), (QpStep::ToRts, Wire::Rep));
        let failed = qp_failed(a, Phase::Requested, 22);
        assert_eq!(
            (failed.qp, failed.wire, failed.next),
            (QpStep::ToErr, Wire::Nothing, Phase::Requested)
        );
        assert!(call(failed.next, Call::Reject, false, true).is_ok());
    }

    #[test]
    fn without_a_qp_the_caller_moves_its_own() {
        let rep = event(Phase::Connecting, Event::Reply, false);
        assert_eq!(
            (rep.qp, rep.wire, rep.next),
            (QpStep::Keep, Wire::Nothing, Phase::Replied)
        );
        assert_eq!(rep.show, Some((CmEventType::ConnectResponse, 0)));
        let e = call(rep.next, Call::Establish, false, false).unwrap();
        assert_eq!((e.wire, e.next), (Wire::Rtu, Phase::Connected));
        let a = call(Phase::Requested, Call::Accept, false, false).unwrap();
        assert_eq!(a.qp, QpStep::Keep);
    }

    proptest! {
        /// Any calls and events in any order: a QP step only where a QP is attached, a
        /// forgotten connection never comes back to life by an event, a call refused
        /// changes nothing, and nothing is shown after CONNECT_ERROR but its end.
        #[test]
        fn any_sequence_keeps_the_rules(
            steps in proptest::collection::vec(
                prop_oneof![
                    (0..CALLS.len()).prop_map(Ok),
                    events().prop_map(Err),
                ],
                1..40,
            ),
            qp in any::<bool>(),
            ud in any::<bool>(),
        ) {
            let mut phase = Phase::Idle;
            let mut forgotten = false;
            for s in steps {
                let plan = match s {
                    Ok(c) => match call(phase, CALLS[c], ud, qp) {
                        Ok(p) => p,
                        Err(_) => continue,
                    },
                    Err(e) => {
                        // The device's CM says nothing of a connection forgotten.
                        if forgotten {
                            continue;
                        }
                        let p = event(phase, e, qp);
                        if phase == Phase::ConnectError {
                            prop_assert_eq!(p.show, None);
                        }
                        p
                    }
                };
                if !qp {
                    prop_assert_eq!(plan.qp, QpStep::Keep);
                }
                let plan = if plan.qp == QpStep::ToRts {
                    qp_failed(plan, phase, 22)
                } else {
                    plan
                };
                if plan.next == Phase::ConnectError {
                    prop_assert_eq!(plan.show, Some((CmEventType::ConnectError, -22)));
                }
                forgotten |= plan.forget;
                if matches!(plan.next, Phase::Connecting | Phase::Requested) {
                    forgotten = false;
                }
                phase = plan.next;
            }
        }
    }
}
