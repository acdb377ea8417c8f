//! The ACK policy of a ping-pong: when the responder's positive ACK waits for a request of
//! ours to take it along, and when it goes alone. All of it is here; the QP asks.

use crate::Nanos;

/// How long a positive ACK is held back at most for a request to take it along, while an
/// application thread polls (its polls send the ACK when the hold ends): a ping-pong's
/// application answers within microseconds.
const ACK_HOLD: Nanos = 10_000;
/// How long it is held while only the engine thread would send it when the hold ends (the
/// application spins on its memory, calling nothing, as riostream's does): the end of a
/// short hold would wake that thread for the ACK alone, on a host whose cores the
/// spinning applications already hold, so the hold waits for the answer instead. One
/// scheduler tick (250 Hz): a timer due before the next tick makes the kernel reprogram
/// the clock for it (5.9 us a time in this VM, `bench/timer_cost.c`), one due after it
/// does not; TCP's delayed-ACK timer is as coarse. A peer that probes meanwhile
/// (`PEER_MAY_HOLD`) gets its ACK at once.
const ACK_HOLD_UNSERVED: Nanos = 4_000_000;
/// How long a requester with one message out allows the peer to hold its ACK before a
/// tail-loss probe (RFC 8985 allows for a delayed ACK the same way): a ping-pong's answer
/// comes sooner; a probe after it ends the peer's hold.
pub(crate) const PEER_MAY_HOLD: Nanos = 200_000;
/// A QP whose last request left this recently holds its ACKs.
const HOLD_IF_SENT_WITHIN: Nanos = 200_000;

/// What the QP tells the policy when a request has just asked for an ACK.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckAsked {
    pub now: Nanos,
    /// An RC QP whose responder has nothing to send but that ACK.
    pub only_an_ack_waits: bool,
    /// A request of ours waits for its own ACK.
    pub ours_outstanding: bool,
    /// When our last message's last packet left.
    pub ours_sent_at: Option<Nanos>,
    /// WQEs in our send queue.
    pub ours_queued: usize,
    /// Whether an application thread serves the engine's timers (it polls): else the end
    /// of a hold would wake the engine thread.
    pub app_serves_timers: bool,
    /// This QP's local ACK timeout (None: it waits forever); peers usually set the same.
    pub ack_timeout: Option<Nanos>,
}

impl AckAsked {
    /// How long the ACK may be held: `ACK_HOLD` while an application polls, else
    /// `ACK_HOLD_UNSERVED`, and never more than a quarter of the local ACK timeout.
    fn hold_for(&self) -> Nanos {
        let hold = if self.app_serves_timers {
            ACK_HOLD
        } else {
            ACK_HOLD_UNSERVED
        };
        self.ack_timeout.map_or(hold, |t| hold.min(t / 4))
    }
}

/// The held ACK's deadline, if one is held.
#[derive(Debug, Default)]
pub(crate) struct AckHold {
    until: Option<Nanos>,
}

impl AckHold {
    /// Holds back the positive ACK a request just asked for, for at most `ACK_HOLD`, while
    /// this QP's one request out waits for its own ACK: the peer is then answering us,
    /// and we are likely about to answer it. A request posted meanwhile goes first and the
    /// ACK right after it (`sent_request`), so the peer, polling for that ACK, takes our
    /// request in the same receive, and does not leave it to its engine thread to place
    /// while it spins on memory (a WRITE ping-pong's wake-up per message, 18-25 us on this
    /// VM). Also when our last request left lately, though acknowledged: a ping-pong that
    /// fell out of step (an ACK that went alone) gets back into it. A peer that only sends,
    /// or a QP with more than one message out (streams both ways), gets its ACK at once.
    pub(crate) fn asked(&mut self, a: AckAsked) {
        // Most request packets (a stream's) ask for nothing: settled on the first question.
        if !a.only_an_ack_waits || self.until.is_some() {
            return;
        }
        let ours_lately = a
            .ours_sent_at
            .is_some_and(|t| a.now.saturating_sub(t) < HOLD_IF_SENT_WITHIN);
        // A ping-pong has one message of ours out at most; a stream (both ways at once)
        // must not hold: each side, its window full, would wait for the other's ACK.
        let one_at_a_time = a.ours_queued <= 1;
        if one_at_a_time && (a.ours_outstanding || ours_lately) {
            self.until = Some(a.now + a.hold_for());
        }
    }

    /// Whether the ACK waits: it does while held and alone (other replies take it along
    /// at once: the hold ends).
    pub(crate) fn waits(&mut self, only_an_ack_waits: bool) -> bool {
        if self.until.is_some() && !only_an_ack_waits {
            self.until = None;
        }
        self.until.is_some()
    }

    /// Whether an ACK is held.
    pub(crate) fn held(&self) -> bool {
        self.until.is_some()
    }

    /// Lets a held ACK go: a request took it along (it goes right after the request), the
    /// requester asked again (a probe), the hold expired, or the QP is going away.
    pub(crate) fn release(&mut self) {
        self.until = None;
    }

    /// Ends a hold due at `now`; true if one was.
    pub(crate) fn expire(&mut self, now: Nanos) -> bool {
        let due = self.until.is_some_and(|t| t <= now);
        if due {
            self.until = None;
        }
        due
    }

    pub(crate) fn deadline(&self) -> Option<Nanos> {
        self.until
    }
}
