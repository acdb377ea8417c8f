//! What the requester and the completer hand each other, through the QP: neither calls
//! the other. The requester sends from a view of what is in flight (`InFlight`, the
//! completer's) and says what it sent (`Sent`); the completer decides from the
//! requester's cursor (`Cursor`) and asks it to send again (`ReqCmd`).

use crate::qp::scoreboard::Scoreboard;
use crate::Nanos;
use oxrdma_wire::Psn;

/// Most PSNs in flight (sent, not acknowledged) per QP under go-back-N (fewer where loss
/// is frequent: `go_back.rs`), and the least selective repeat's window falls to.
pub(crate) const WINDOW: u32 = 512;
/// PSNs in flight at most under selective repeat: what a responder keeps ahead of a gap,
/// well inside half the 24-bit PSN space.
pub(crate) const SR_SPAN: u32 = crate::qp::responder::MAX_SPAN / 2;

/// A request packet the requester just built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    pub psn: Psn,
    /// PSNs it consumes (a READ request: one per response packet).
    pub psns: u32,
    /// Sent for the first time.
    pub fresh: bool,
    pub ack_req: bool,
    /// A READ or atomic request.
    pub asks: bool,
}

/// The packets a run of middle packets sent for the first time (`Sender::next_middles`),
/// for the completer: `count` PSNs from `first`, and the first that asks for an ACK.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunSent {
    pub first: Psn,
    pub count: u32,
    pub first_ask: Option<Psn>,
}

/// Where the requester stands, as the completer needs to know it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor {
    /// One past the highest PSN ever sent: the end of what is outstanding.
    pub high_psn: Psn,
    /// A repair pass is under way.
    pub repairing: bool,
    /// The next PSN to send, and whether a command since moved it (`Rewind`, `Probe`):
    /// the completer asks it to seek past what an ACK covers only where it lags.
    pub next_psn: Psn,
    pub moved: bool,
}

/// What the completer asks of the requester, applied in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReqCmd {
    /// Go-back-N: send again from this PSN (a repair pass under way ends).
    Rewind(Psn),
    /// Everything before this PSN is acknowledged: the cursor moves up to it if behind.
    SeekPast(Psn),
    /// Ask again for the READ and atomic responses that the answer to request `through`,
    /// up to its response `end`, shows lost (`Requester::repair`).
    Repair { through: u64, end: Psn },
    /// A tail-loss probe: the last packet sent, again, or from `una` if a resend is under
    /// way or the responder holds packets beyond a gap.
    Probe { beyond_gap: bool },
    /// A probe of the packet at `una` alone (then sending goes on where it was).
    ProbeOldest,
}

/// What is in flight, as the completer sees it: the requester sends within it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InFlight<'a> {
    /// Oldest PSN not yet acknowledged.
    pub una: Psn,
    /// Selective repeat's scoreboard, once the peer speaks it.
    pub sb: Option<&'a Scoreboard>,
    /// The send window in PSNs.
    pub window: u32,
    /// The PSN an RNR NAK made us wait to resend, while we wait.
    pub rnr_wait: Option<Psn>,
    pub srtt: Option<Nanos>,
    /// Pacing holds the next packet back for now.
    pub paced: bool,
    /// This QP paces its packets (each one sent moves the next one's time).
    pub paces: bool,
}

impl InFlight<'_> {
    /// Whether no new packet may be sent: as many are in flight as the window allows
    /// (selective repeat: packets neither held nor lost, against the window, and never
    /// more PSNs than the responder keeps; go-back-N: PSNs since `una`, against its window).
    pub fn window_full(&self, next: Psn) -> bool {
        self.room(next) == 0
    }

    /// How many new packets may go from `next` on, each in flight once sent, before the
    /// window is full.
    pub fn room(&self, next: Psn) -> u32 {
        if self.paced {
            return 0;
        }
        let span = self.una.distance_to(next);
        match self.sb {
            Some(sb) => SR_SPAN
                .saturating_sub(span)
                .min(self.window.saturating_sub(sb.in_flight())),
            None => self.window.saturating_sub(span),
        }
    }

    /// Whether no lost packet may be sent again yet: as many packets are in flight as the
    /// window allows (a resend takes the place of the packet lost, in flight again).
    pub fn window_full_again(&self) -> bool {
        self.paced || self.sb.is_some_and(|sb| sb.in_flight() >= self.window)
    }

    /// Whether sending up to `after` fills the window (the packet asks for an ACK, so the
    /// window opens again as soon as the peer has it).
    /// `unrecorded`: packets built before it that the scoreboard does not count yet (a
    /// run's, `Sender::next_middles`).
    pub fn fills_window(&self, after: Psn, unrecorded: u32) -> bool {
        match self.sb {
            Some(sb) => sb.in_flight() + unrecorded + 1 >= self.window,
            None => self.una.distance_to(after) >= self.window,
        }
    }

    /// Whether a packet found lost waits to be sent again.
    pub fn has_lost(&self) -> bool {
        self.sb.is_some_and(Scoreboard::has_lost)
    }

    /// Whether the responder holds `psn` (selective repeat).
    pub fn held(&self, psn: Psn) -> bool {
        self.sb.is_some_and(|s| s.holds(psn))
    }

    /// Whether the peer speaks selective repeat.
    pub fn selective(&self) -> bool {
        self.sb.is_some()
    }
}
