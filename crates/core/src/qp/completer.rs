//! The completer: processes ACKs, NAKs, READ responses and atomic ACKs, completes send WQEs
//! in order, and drives retransmission (NAK, timeout, RNR). It owns every transport timer
//! and the RTT estimate; it learns what was sent from `Sent`, and asks the requester to
//! send again with `ReqCmd` (the QP carries both).

use crate::counters::{Counter, Counters};
use crate::drops::RxDrop;
use crate::mr::scatter;
use crate::qp::ack_hold::PEER_MAY_HOLD;
use crate::qp::go_back::GoBackWindow;
use crate::qp::handoff::{Cursor, InFlight, ReqCmd, RunSent, Sent, SR_SPAN, WINDOW};
use crate::qp::scoreboard::Scoreboard;
use crate::qp::send_queue::SendQueue;
use crate::qp::window::Window;
use crate::qp::{Ctx, SendWqe};
use crate::timers::{Timer, TimerTable};
use crate::verbs::{Mtu, QpState, WcStatus, WrOpcode};
use crate::Nanos;
use oxrdma_wire::aeth::rnr_timer_micros;
use oxrdma_wire::{NakCode, Opcode, Operation, PacketRepr, Psn, Syndrome};
use std::collections::VecDeque;

/// Tail-loss probes per stall before only the ACK timeout is left: two before an RTT
/// sample (the timeout is then a guess, and a slow peer's answer to the first is learnt
/// from), four after, each from the third on waiting twice as long as the one before. At
/// 5 % loss a go-back's first packet and the second probe's copy of it were both lost
/// often enough that a stall with two probes still waited out the ACK timeout.
const MAX_PROBES: u8 = 2;
const MAX_PROBES_SAMPLED: u8 = 4;

/// A peer that answers a packet the ACK timeout sent again within this is no slow one
/// (a third of the probe timeout used before an RTT estimate).
const PROMPT: Nanos = 300_000;

/// What the completer owns: how far the peer has acknowledged, the retry budgets, the RTT
/// estimate and every retransmission deadline.
#[derive(Debug, Default)]
pub(crate) struct Completer {
    /// What it counts: NAKs received, timeouts, probes, retries and their end.
    pub counts: Counters,
    /// Oldest PSN not yet acknowledged (the completer's expected PSN).
    una: Psn,
    /// The responder has every request before this PSN (an ACK, or a READ response, says
    /// so): sends and writes there complete once the READs and atomics before them do.
    seen: Psn,
    retries_left: u8,
    rnr_retries_left: u8,
    /// The retransmit, RNR-wait and probe deadlines.
    timers: TimerTable,
    /// While the RNR wait runs: the PSN to resume from.
    rnr_psn: Psn,
    /// Set at each retry (a go-back, or a repair that spends one) to `una` and when: a
    /// PSN-sequence NAK or stray response in the same burst (often drawn by what the retry
    /// resent) does not go back again, unless it comes a probe timeout later.
    retry_psn: Option<(Psn, Nanos)>,
    /// Smoothed round-trip time, from AckReq packets sent once (Karn's rule).
    srtt: Option<Nanos>,
    /// How much the RTT varies (RFC 6298's RTTVAR).
    rttvar: Nanos,
    /// Tail-loss probes sent in this stall (the Probe timer resends from `una` if nothing
    /// has moved, without spending retry_cnt: a lost last packet or ACK would otherwise wait
    /// a whole ACK timeout).
    probes: u8,
    /// An ACK came for a PSN past the READ or atomic at the front while it still lacked
    /// responses (`ack_through`): unless they come within a probe timeout, they are lost.
    passed: bool,
    /// A probe sent the packet at `una` alone, and no ACK has moved `una` since.
    oldest_probed: bool,
    /// The last move of `una` answered a probe of the packet at `una` alone, and moved it
    /// one packet: under go-back-N, a responder that dropped what followed a gap.
    answered_alone: bool,
    /// While there is no RTT estimate: the timed packet a probe made ambiguous, and when
    /// the probe left (see `Completing::rtt_sample_for`).
    probed_sample: Option<(Psn, Nanos)>,
    /// The ACK timeout went back while there was no RTT estimate: the first packet that
    /// go-back sends asking for an ACK is timed (`resent_at`). Its first copy was
    /// sent an ACK timeout ago, so what answers it answers this copy.
    time_resend: bool,
    resent_at: Option<(Psn, Nanos)>,
    /// That copy was answered within `PROMPT`: the peer is no slow one, so a READ may be
    /// probed before there is an RTT estimate (see `replays`). Without it, a QP whose
    /// packets were all probed or sent again before their answers came (a READ stream at
    /// 5 % loss) never had an estimate, no probe went for its READs, and each lost one
    /// waited out the ACK timeout (24 times in one simulator run). The sample does not
    /// go into the estimate: taken right after a partition, it came from an empty path
    /// that the go-back then filled, and probe timeouts from it asked READs again too soon
    /// (and spent retry_cnt 1: `sim_suite`'s short partition, seed 70013).
    prompt: bool,
    /// Once the peer's responses carry the selective-repeat bit: what it holds and what is
    /// lost (until then, and with peers that never set it, go-back-N).
    sb: Option<Scoreboard>,
    /// The send window of selective repeat, from the delivery rate and the RTT floor.
    win: Window,
    /// The send window of go-back-N, from the loss rate.
    go_back: GoBackWindow,
    /// The packet being timed for the next RTT sample: its PSN and when it left.
    rtt_sample: Option<(Psn, Nanos)>,
    /// The repair pass just asked for asks for responses known lost (the responder
    /// answered a later request): only the pass's request can draw them, so its first one
    /// is timed (`reask_timed`), Karn's rule notwithstanding. Without it, a go-back-N READ
    /// repaired piece by piece took no sample, and each lost ask waited a probe timeout
    /// from an RTT measured while the path was full: 6-9 ms for 11 us round trips
    /// (`go_back.rs`, seed 1032).
    time_repair: bool,
    /// That request: its PSN (its first response's) and when it left. Only that response
    /// times it: an ACK past it says nothing of it (the responder had the READ already,
    /// and takes the request as a duplicate), so it has a slot of its own, and packets sent
    /// for the first time are still timed beside it.
    reask_timed: Option<(Psn, Nanos)>,
    /// What the requester is to do, in order (the QP takes them: `take_cmd`).
    cmds: VecDeque<ReqCmd>,
    /// CNPs received, ever.
    cnps: u64,
    /// Pacing: when the next packet may leave (packets up to `PACE_BURST` gaps early go).
    pace_at: Nanos,
    /// This QP's part of the host's window, where it is less than `WINDOW`
    /// (`engine/share.rs`).
    share: Option<u32>,
    /// Responses the READ requests sent again may still draw (one per PSN each asked
    /// for): what a responder replays for them (`Completing::replayed`), and no more.
    replays_due: u32,
    /// The first PSNs the last probes asked a READ's responses again from: such a response
    /// coming when we had it already shows the probe need not have asked (the responses
    /// had paused, not stopped).
    read_probed: [Option<Psn>; 4],
    /// The least a probe waits before it asks a READ again: doubled by each probe a replay
    /// showed needless, up to half the ACK timeout (0: the probe timeout decides).
    read_wait: Nanos,
}

/// Most a probe of a READ waits where the ACK timeout is infinite (`read_wait`).
const MAX_READ_WAIT: Nanos = 500_000_000;

/// Most `replays_due` holds: 64 READs of 2 GiB at 4 KiB packets' worth.
const MAX_REPLAYS_DUE: u32 = 1 << 25;

/// Packets a paced QP may send back to back (one GSO run's worth): pacing is for the
/// path's queue, which a few packets do not fill.
const PACE_BURST: u64 = 16;

impl Completer {
    /// The first PSN the requester will send is the first to be acknowledged.
    pub(crate) fn start_at(&mut self, psn: Psn) {
        self.una = psn;
        self.seen = psn;
    }

    /// The responder has every request before `psn`.
    fn saw(&mut self, psn: Psn) {
        if self.seen.before(psn) {
            self.seen = psn;
        }
    }

    /// Full retry budgets (on entering RTS, and after progress).
    pub(crate) fn refill_retries(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retries_left = retry_cnt;
        self.rnr_retries_left = rnr_retry;
    }

    /// Oldest PSN not yet acknowledged.
    pub(crate) fn una(&self) -> Psn {
        self.una
    }

    /// Takes an RTT sample into the smoothed RTT, its variation and (`exact`: not timed
    /// from a probe, so never short) the window's RTT floor.
    fn rtt_sample(&mut self, sample: Nanos, exact: bool) {
        match self.srtt {
            None => (self.srtt, self.rttvar) = (Some(sample), sample / 2),
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(sample)) / 4;
                self.srtt = Some((7 * s + sample) / 8);
            }
        }
        if exact {
            self.win.rtt(sample);
        }
    }

    /// The smoothed round-trip time, once there is a sample.
    pub(crate) fn srtt(&self) -> Option<Nanos> {
        self.srtt
    }

    /// UC/UD: packets before `next` left and nothing waits for their ACK.
    pub(crate) fn unreliable_sent(&mut self, next: Psn) {
        self.una = next;
        self.timers.stop(Timer::Retransmit);
        self.timers.stop(Timer::Probe);
    }

    pub(crate) fn stop_timers(&mut self) {
        self.timers.stop_all();
    }

    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.timers.next()
    }

    /// Whether the peer speaks selective repeat.
    pub(crate) fn selective(&self) -> bool {
        self.sb.is_some()
    }

    /// The send window in PSNs.
    pub(crate) fn window(&self) -> u32 {
        match self.sb {
            Some(_) => self.win.size(self.floor(), SR_SPAN),
            None => self.go_back.size(self.floor()),
        }
    }

    /// The window of a short path: `WINDOW`, or this QP's part of the host's.
    fn floor(&self) -> u32 {
        self.share.map_or(WINDOW, |s| s.min(WINDOW))
    }

    /// This QP's part of the host's window, as the engine counts the QPs sending.
    pub(crate) fn set_share(&mut self, share: u32) {
        self.share = Some(share);
    }

    /// What is in flight at `now`, for the requester.
    pub(crate) fn in_flight(&self, now: Nanos) -> InFlight<'_> {
        InFlight {
            una: self.una,
            sb: self.sb.as_ref(),
            window: self.window(),
            rnr_wait: self.rnr_wait(),
            srtt: self.srtt,
            paced: self.pace_at > now,
            paces: self.pace_gap().is_some(),
        }
    }

    /// The gap between two paced packets, if this QP paces (selective repeat on a long
    /// path: `Window::pace_gap`).
    fn pace_gap(&self) -> Option<Nanos> {
        self.sb.as_ref()?;
        self.win.pace_gap(self.floor(), SR_SPAN)
    }

    /// The PSN an RNR NAK made us wait to resend, while we wait.
    pub(crate) fn rnr_wait(&self) -> Option<Psn> {
        self.timers
            .is_running(Timer::RnrWait)
            .then_some(self.rnr_psn)
    }

    /// Whether a packet found lost waits to be sent again.
    pub(crate) fn has_lost(&self) -> bool {
        self.sb.as_ref().is_some_and(Scoreboard::has_lost)
    }

    /// The next packet found lost, to send again (counted as sent again).
    pub(crate) fn take_lost(&mut self) -> Option<Psn> {
        self.sb.as_mut()?.next_lost()
    }

    /// What the requester is to do next, in order.
    pub(crate) fn take_cmd(&mut self) -> Option<ReqCmd> {
        self.cmds.pop_front()
    }

    /// The peer's CNP: under selective repeat the window yields (`Window::cnp`).
    pub(crate) fn cnp(&mut self) {
        self.cnps += 1;
        if self.sb.is_some() {
            self.win.cnp();
        }
    }

    /// CNPs received, ever.
    pub(crate) fn cnps(&self) -> u64 {
        self.cnps
    }

    /// The smallest RTT measured (selective repeat sizes its window with it).
    pub(crate) fn min_rtt(&self) -> Option<Nanos> {
        self.win.min_rtt()
    }

    /// A probe asks a READ's responses again from `psn` (`read_probed`).
    fn read_probed(&mut self, psn: Psn) {
        self.read_probed.rotate_right(1);
        self.read_probed[0] = Some(psn);
    }

    /// Packets resent because selective repeat found them lost.
    pub(crate) fn resent(&self) -> u64 {
        self.sb.as_ref().map_or(0, |s| s.resent)
    }
}

fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
        _ => WcStatus::RemInvReqErr,
    }
}

/// What the completer needs to know of its QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CompView {
    pub state: QpState,
    pub mtu: Mtu,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// The local ACK timeout (None: wait forever).
    pub ack_timeout: Option<Nanos>,
    /// The device speaks selective repeat.
    pub selective_repeat: bool,
}

/// The completer at work for one call: itself, its QP's attributes, the send queue, and
/// where the requester stands.
pub(crate) struct Completing<'a> {
    pub c: &'a mut Completer,
    pub q: &'a CompView,
    pub sq: &'a mut SendQueue,
    pub cur: Cursor,
}

impl Completing<'_> {
    /// Whether the QP is in ERR, or a WQE failed and it is to go there.
    fn dead(&self) -> bool {
        self.q.state == QpState::Err || self.sq.failed()
    }

    /// Asks the requester to do `cmd` (after this call). What it sends again is timed no
    /// more (Karn: which copy an ACK answers is unknown).
    fn cmd(&mut self, cmd: ReqCmd) {
        match cmd {
            ReqCmd::Rewind(_) | ReqCmd::Probe { .. } | ReqCmd::ProbeOldest => {
                (self.cur.repairing, self.cur.moved) = (false, true);
                self.c.rtt_sample = None;
                (self.c.time_resend, self.c.time_repair) = (false, false);
                self.c.reask_timed = None;
            }
            ReqCmd::Repair { .. } => {
                self.cur.repairing = true;
                self.c.rtt_sample = None;
                // It may ask for the timed request's responses again.
                self.c.reask_timed = None;
            }
            ReqCmd::SeekPast(_) => {}
        }
        self.c.cmds.push_back(cmd);
    }

    /// Request packet `s` left: the scoreboard, the RTT sample (Karn: a packet sent again
    /// is timed no more), the ACK timer and the probe.
    pub(crate) fn sent(&mut self, s: &Sent, now: Nanos) {
        self.sent_in_run(s, now);
        self.arm_probe(now);
    }

    /// [`Self::sent`] but for the probe, for a packet of a run (`Qp::next_request_run`):
    /// the probe is armed once, after the run's last packet, as the last `sent` would.
    pub(crate) fn sent_in_run(&mut self, s: &Sent, now: Nanos) {
        if let Some(sb) = self.c.sb.as_mut() {
            sb.sent_packet(s.psn, s.psns, s.asks);
        }
        if s.ack_req && std::mem::take(&mut self.c.time_resend) {
            self.c.resent_at = Some((s.psn, now));
        }
        if s.asks && !s.fresh {
            let due = self.c.replays_due.saturating_add(s.psns);
            self.c.replays_due = due.min(MAX_REPLAYS_DUE);
        }
        if s.asks && self.cur.repairing && std::mem::take(&mut self.c.time_repair) {
            self.c.reask_timed = Some((s.psn, now));
        }
        if s.fresh {
            if s.ack_req && self.c.rtt_sample.is_none() {
                self.c.rtt_sample = Some((s.psn, now));
            }
        } else if self
            .c
            .rtt_sample
            .is_some_and(|(p, _)| p.in_window(s.psn, s.psns))
        {
            self.c.rtt_sample = None;
        }
        if !self.c.timers.is_running(Timer::Retransmit) {
            self.restart_ack_timer(now);
        }
        if let Some(gap) = self.c.pace_gap() {
            // A token bucket in time: `pace_at` moves a gap per packet, and never lags
            // `now` by more than a burst.
            let c = &mut *self.c;
            c.pace_at = c.pace_at.max(now.saturating_sub((PACE_BURST - 1) * gap)) + gap;
            if c.pace_at > now {
                c.timers.set(Timer::Pace, c.pace_at);
            }
        }
    }

    /// [`Self::sent_in_run`] for a whole run built at once (`Sender::next_middles`):
    /// packets sent for the first time, by a QP that does not pace.
    pub(crate) fn sent_run(&mut self, run: &RunSent, now: Nanos) {
        if let Some(sb) = self.c.sb.as_mut() {
            for k in 0..run.count {
                sb.sent_packet(run.first.add(k), 1, false);
            }
        }
        if let (Some(psn), None) = (run.first_ask, self.c.rtt_sample) {
            self.c.rtt_sample = Some((psn, now));
        }
        if !self.c.timers.is_running(Timer::Retransmit) {
            self.restart_ack_timer(now);
        }
    }

    /// A response-type packet (ACK, READ response, atomic ACK) for this QP's requester.
    /// Err says why it was dropped.
    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RxDrop> {
        if self.q.state != QpState::Rts && self.q.state != QpState::Sqd {
            return Err(RxDrop::QpState);
        }
        let psn = pkt.bth.psn;
        if pkt.bth.selective_repeat && self.q.selective_repeat && self.c.sb.is_none() {
            self.start_selective_repeat();
        }
        let info = pkt.bth.opcode.info().map_err(|_| RxDrop::Malformed)?;
        let outstanding = self.c.una.distance_to(self.cur.high_psn);
        let result = match (info.operation, pkt.ext.aeth.map(|a| a.syndrome)) {
            // An ACK of nothing new may still say what the responder holds.
            _ if !psn.in_window(self.c.una, outstanding) => {
                if info.operation == Operation::ReadResponse {
                    self.replayed(ctx.now, psn);
                }
                if !self.sacked(ctx, pkt) {
                    return Err(RxDrop::StaleResponse);
                }
                Ok(())
            }
            (Operation::Acknowledge, Some(Syndrome::Ack { .. })) => {
                self.sacked(ctx, pkt);
                self.ack_through(ctx, psn);
                Ok(())
            }
            (Operation::Acknowledge, Some(Syndrome::RnrNak { timer })) => {
                self.c.counts.bump(Counter::RcvdRnrErr);
                self.ack_before(ctx, psn);
                self.rnr_nak(ctx, psn, timer);
                Ok(())
            }
            (Operation::Acknowledge, Some(Syndrome::Nak(NakCode::PsnSequenceError))) => {
                self.c.counts.bump(Counter::RcvdSeqErr);
                self.ack_before(ctx, psn);
                if self.dead() || self.c.rnr_wait() == Some(psn) {
                    // Dead, or the echo of an RNR NAK we are already waiting out.
                } else {
                    // From the NAKed PSN, or from a READ or atomic before it that still
                    // lacks its response (never past it); once per burst (a duplicated
                    // NAK is no second loss).
                    self.go_back_once(ctx);
                }
                Ok(())
            }
            (Operation::Acknowledge, Some(Syndrome::Nak(code))) => {
                self.c.counts.bump(if code == NakCode::RemoteAccessError {
                    Counter::ReqRemoteAccessErrors
                } else {
                    Counter::RcvdNakOther
                });
                self.ack_before(ctx, psn);
                if self.sq.front().is_some_and(|w| w.holds(psn)) {
                    self.sq.fail_front(ctx, nak_status(code));
                }
                Ok(())
            }
            (Operation::ReadResponse, _) => self.read_response(ctx, pkt),
            (Operation::AtomicAcknowledge, _) => self.atomic_ack(ctx, pkt),
            _ => Err(RxDrop::UnexpectedResponse),
        };
        if let Some(sb) = self.c.sb.as_mut() {
            sb.find_lost();
        }
        self.sq.drain_local_front(ctx);
        self.sq.report_local_errors(ctx);
        result
    }

    /// Everything up to and including `psn` is acknowledged (an ACK). An ACK past a READ
    /// or atomic still missing responses is no proof that they were lost: the ACK of a
    /// duplicate request carries the newest PSN, ahead of responses the responder is still
    /// replaying (rxe does the same). Later responses tell, or a probe timeout without
    /// them (`passed`): the responder answers in order, so by then they were lost.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        self.c.saw(psn.next());
        self.settle(ctx);
        let waits = self.sq.front().is_some_and(|w| {
            w.started && w.wr.opcode.is_read_or_atomic() && !psn.before(w.first_psn)
        });
        if !waits {
            self.advance_una(ctx, psn.next());
            return;
        }
        // `una` stays at the READ or atomic, but the ACK still times the packet it covers.
        self.time_sample_through(ctx.now, psn);
        if !self.c.passed {
            self.c.passed = true;
            self.arm_probe(ctx.now);
        }
    }

    /// An answer to every request up to `psn` came at `now`: the RTT sample, if its packet
    /// is among them. Without this, while a READ short of responses holds `una` (at a few
    /// per cent loss, most of the time), no sample was ever taken, and READs, which are
    /// probed only once one exists, waited for the ACK timeout.
    fn time_sample_through(&mut self, now: Nanos, psn: Psn) {
        if let Some((_, sent)) = self.c.rtt_sample.filter(|&(p, _)| !psn.before(p)) {
            self.c.rtt_sample = None;
            self.c.rtt_sample(now.saturating_sub(sent), true);
        }
    }

    /// A response with PSN `psn` came at `now`: the RTT sample of the repair request timed
    /// (`reask_timed`), if it asked for it.
    fn time_reask(&mut self, now: Nanos, psn: Psn) {
        if let Some((_, sent)) = self.c.reask_timed.filter(|&(p, _)| p == psn) {
            self.c.reask_timed = None;
            self.c.rtt_sample(now.saturating_sub(sent), true);
        }
    }

    /// The peer's responses carry the selective-repeat bit: from now on it keeps packets
    /// that arrive ahead of a gap. The scoreboard starts with what is outstanding, one entry
    /// per request packet (a READ's response PSNs are no packets of ours).
    fn start_selective_repeat(&mut self) {
        let (una, high) = (self.c.una, self.cur.high_psn);
        let mut sb = Scoreboard::new(una, una);
        let mut p = una;
        for w in self.sq.iter().take_while(|w| w.started) {
            if w.npkts == 0 || w.last_psn().before(p) {
                continue;
            }
            if w.wr.opcode.is_read_or_atomic() {
                let end = w.first_psn.add(w.npkts);
                sb.sent_packet(p, p.distance_to(end), true);
                p = end;
            } else {
                while !w.last_psn().before(p) && p.before(high) {
                    sb.sent_packet(p, 1, false);
                    p = p.next();
                }
            }
        }
        self.c.sb = Some(sb);
    }

    /// The SACK of a selective-repeat ACK: what it shows held; true if it carried one.
    fn sacked(&mut self, ctx: &Ctx<'_>, pkt: &PacketRepr<'_>) -> bool {
        // Only an ACK's payload is a SACK. A READ response's AETH says ACK too, and its
        // payload is data: taken as a bitmap (a replayed response, before `una`), it
        // marked random packets held, so they were never sent again until the ACK timeout.
        let positive = pkt.bth.opcode == Opcode::RC_ACKNOWLEDGE
            && matches!(pkt.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }));
        let Some(sb) = self.c.sb.as_mut() else {
            return false;
        };
        if !pkt.bth.selective_repeat || !positive || pkt.payload.is_empty() {
            return false;
        }
        let before = sb.delivered;
        for (start, end) in oxrdma_wire::sack::runs(pkt.bth.psn, pkt.payload) {
            sb.sacked(start, end);
        }
        let progress = sb.delivered != before;
        self.c
            .win
            .sample(ctx.now, sb.delivered, sb.found_lost, WINDOW);
        // The timed packet may be held beyond a gap: its RTT is known now, not when the
        // gap fills.
        if let Some((_, sent)) = self.c.rtt_sample.filter(|&(p, _)| sb.holds(p)) {
            self.c.rtt_sample = None;
            self.c.rtt_sample(ctx.now.saturating_sub(sent), true);
        }
        if progress {
            // The path delivers: what is missing is being sent again as it is found lost,
            // so neither the ACK timeout nor a probe is due yet (retry_cnt still counts
            // only timeouts without progress at `una`).
            self.restart_ack_timer(ctx.now);
            self.arm_probe(ctx.now);
        }
        true
    }

    /// A READ response we had already: the responder replays a READ we asked for again
    /// (whole, as rxe does, or the rest of it), and answers requests in order, so what we
    /// asked after that READ waits behind the replay: neither a probe nor the ACK timeout
    /// is due yet. Against rxe in a TCG guest, probes asked the READ queued behind a
    /// replay again every probe timeout, each copy cost rxe another whole replay, and the
    /// QP ended in RETRY_EXC with 22,604 responses dropped as stale. Only as many
    /// responses as our requests sent again can draw count (`replays_due`): a stream of
    /// forged ones cannot hold the timers off.
    ///
    /// A replay of what a probe of a READ asked for shows the responder only paused: probes
    /// of READs wait twice as long from then on (rxe in a TCG guest pauses for milliseconds
    /// mid-READ, where its first response came within 0.5 ms).
    fn replayed(&mut self, now: Nanos, psn: Psn) {
        if self.c.replays_due == 0 || self.dead() {
            return;
        }
        self.c.replays_due -= 1;
        if let Some(p) = self.c.read_probed.iter_mut().find(|p| **p == Some(psn)) {
            *p = None;
            let most = self.retransmit_timeout().map_or(MAX_READ_WAIT, |t| t / 2);
            self.c.read_wait = (2 * self.c.read_wait.max(self.probe_timeout())).min(most);
        }
        if self.c.una != self.cur.high_psn {
            self.restart_ack_timer(now);
            self.arm_probe(now);
        }
    }

    /// Everything before `psn` is acknowledged (a NAK's implicit ACK).
    fn ack_before(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn != self.c.una {
            self.ack_through(ctx, psn.sub(1));
        }
    }

    /// Records progress up to (not including) `una`: retry budgets refill, the timer
    /// restarts.
    fn advance_una(&mut self, ctx: &Ctx<'_>, una: Psn) {
        if !self.c.una.before(una) {
            return;
        }
        if let Some((sample, exact)) = self.rtt_sample_for(ctx.now, una) {
            self.c.rtt_sample(sample, exact);
        }
        if let Some((_, at)) = self.c.resent_at.filter(|&(p, _)| p.before(una)) {
            self.c.resent_at = None;
            self.c.prompt |= ctx.now.saturating_sub(at) < PROMPT;
        }
        self.c.answered_alone =
            std::mem::take(&mut self.c.oldest_probed) && una == self.c.una.next();
        self.c.go_back.acked(self.c.una.distance_to(una));
        self.c.una = una;
        self.c.passed = false;
        if let Some(sb) = self.c.sb.as_mut() {
            sb.acked(una);
            self.c
                .win
                .sample(ctx.now, sb.delivered, sb.found_lost, WINDOW);
        }
        self.c.probes = 0;
        self.c.retry_psn = None;
        if self.c.rnr_wait().is_some_and(|p| p.before(una)) {
            // The PSN that met RNR got through after all (a late copy found a receive).
            self.c.timers.stop(Timer::RnrWait);
        }
        self.c.refill_retries(self.q.retry_cnt, self.q.rnr_retry);
        if self.cur.moved || self.cur.next_psn.before(una) {
            // An ACK for packets we are about to resend: they are skipped.
            self.cmd(ReqCmd::SeekPast(una));
        }
        let deadline = if una == self.cur.high_psn {
            None
        } else {
            self.retransmit_timeout().map(|t| ctx.now + t)
        };
        self.c.timers.set_or_stop(Timer::Retransmit, deadline);
        self.arm_probe(ctx.now);
    }

    /// The RTT sample an ACK up to `una` gives, if any. Karn's rule: only packets sent once
    /// are timed. One exception breaks a trap: if the first probe timeout is shorter than
    /// the peer's RTT (a slow VM, a long path), every timed packet is probed before its ACK
    /// and no estimate would ever form. So, while there is none, an ACK for a probed packet
    /// is timed from the probe: exact if it answers the probe, short by at most the probe
    /// timeout if it answers the original.
    /// The second value says whether the sample is exact (not timed from a probe).
    fn rtt_sample_for(&mut self, now: Nanos, una: Psn) -> Option<(Nanos, bool)> {
        if let Some((_, sent)) = self.c.rtt_sample.filter(|&(p, _)| p.before(una)) {
            self.c.rtt_sample = None;
            return Some((now.saturating_sub(sent), true));
        }
        let c = &mut *self.c;
        let (_, probe) = c.probed_sample.filter(|&(p, _)| p.before(una))?;
        c.probed_sample = None;
        c.srtt.is_none().then(|| (now.saturating_sub(probe), false))
    }

    /// Resends from `from`, if the retry budget allows; otherwise fails the front WQE.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, from: Psn) {
        if self.c.retries_left == 0 {
            self.c.counts.bump(Counter::RetryExceeded);
            self.sq.fail_front(ctx, WcStatus::RetryExcErr);
            return;
        }
        self.c.retries_left -= 1;
        self.c.counts.bump(Counter::CompleterRetry);
        // What a probe made ambiguous is sent again now: no sample from it (Karn).
        self.c.probed_sample = None;
        self.c.oldest_probed = false;
        let una = self.c.una;
        match self.c.sb.as_mut() {
            // Selective repeat: everything the responder does not hold counts as lost, and
            // goes again as the window lets it (a go-back would send it all at once, into
            // the queue that may have lost it).
            Some(sb) if sb.is_packet(una) => sb.mark_all_lost(),
            Some(sb) => {
                // A READ or atomic at the front awaits a response: the go-back asks again.
                sb.forget_lost();
                self.cmd(ReqCmd::Rewind(from));
            }
            None => {
                self.c.go_back.went_back();
                self.cmd(ReqCmd::Rewind(from));
            }
        }
        self.restart_ack_timer(ctx.now);
        // What this resends may arrive out of order and draw a NAK: that is no new loss.
        self.c.retry_psn = Some((self.c.una, ctx.now));
    }

    /// A PSN-sequence NAK, or a response no outstanding READ or atomic explains: go back
    /// to `una`, once per burst (a burst lasts a probe timeout: what still arrives after
    /// that answers the go-back's own requests, so what it asked for first was lost again).
    fn go_back_once(&mut self, ctx: &mut Ctx<'_>) {
        let una = self.c.una;
        let again_at = |at: Nanos| at + self.probe_timeout();
        if !matches!(self.c.retry_psn, Some((p, at)) if p == una && ctx.now < again_at(at)) {
            self.retry(ctx, una);
        }
    }

    fn rnr_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, timer: u8) {
        if self.dead() || !self.sq.front().is_some_and(|w| w.holds(psn)) {
            return;
        }
        if self.c.rnr_retries_left == 0 {
            self.c.counts.bump(Counter::RnrRetryExceeded);
            self.sq.fail_front(ctx, WcStatus::RnrRetryExcErr);
            return;
        }
        if self.q.rnr_retry != 7 {
            self.c.rnr_retries_left -= 1;
        }
        let wait = u64::from(rnr_timer_micros(timer)) * 1000;
        self.c.timers.set(Timer::RnrWait, ctx.now + wait);
        self.c.rnr_psn = psn;
        self.c.timers.stop(Timer::Retransmit);
    }

    /// A response at `psn` that no outstanding READ or atomic of ours explains (it is
    /// dropped): sends and writes before it were implicitly acknowledged, unless a READ or
    /// atomic at the front still waits, whose responses it then shows lost.
    fn stray_response(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn == self.c.una {
            return;
        }
        let front_waits = self
            .sq
            .front()
            .is_some_and(|w| w.wr.opcode.is_read_or_atomic());
        if front_waits {
            self.go_back_once(ctx);
        } else {
            self.ack_through(ctx, psn.sub(1));
        }
    }

    /// A READ response, placed by its PSN in whichever outstanding READ it belongs to: one
    /// that arrives ahead of a missing one is kept, so reordering costs nothing; when a
    /// stream of the responder's ends with responses missing before it, only those are asked
    /// for again (`ask_again_if_lost`).
    fn read_response(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
        const UNEXPECTED: Result<(), RxDrop> = Err(RxDrop::UnexpectedResponse);
        let psn = pkt.bth.psn;
        let Some(k) = self
            .sq
            .iter()
            .position(|w| w.wr.opcode == WrOpcode::RdmaRead && w.holds(psn))
        else {
            // No READ of ours has this PSN.
            self.stray_response(ctx, psn);
            return UNEXPECTED;
        };
        if self.dead() {
            return UNEXPECTED;
        }
        let mtu = self.q.mtu.bytes() as u64;
        let una = self.c.una;
        let w = &mut self.sq[k];
        let i = w.first_psn.distance_to(psn);
        if w.next_missing(i, una) != i {
            self.replayed(ctx.now, psn);
            return Err(RxDrop::StaleResponse);
        }
        let off = u64::from(i) * mtu;
        let n = mtu.min(w.len - off);
        let ends_read = off + n == w.len;
        // A replayed range ends in a LAST response wherever it ends (rxe's, ours), so
        // only a stream that runs on past the READ's end is wrong.
        let ends_stream = pkt
            .bth
            .opcode
            .info()
            .is_ok_and(|i| i.position.ends_message());
        if pkt.payload.len() as u64 != n || (ends_read && !ends_stream) {
            return UNEXPECTED; // does not fit: treat as lost; retransmission will sort it out
        }
        if !scatter(&w.segs, off as usize, pkt.payload) {
            return UNEXPECTED;
        }
        let (first, asked) = (w.first_psn, w.asks.of(i));
        if psn == una {
            self.advance_una(ctx, psn.next());
        } else {
            w.arrived.insert(i);
            if i == 0 && self.c.rtt_sample.is_some_and(|(p, _)| p == psn) {
                // The first response to the READ's request, timed, times it. Not a later
                // response (the responder may have sent it long after), nor an earlier
                // packet timed (the READ's request may have left long after it).
                self.time_sample_through(ctx.now, psn);
            }
            // Responses still come (a replay, beyond a gap): the READ has not stopped, and
            // what an ACK passed is not lost yet.
            self.arm_probe(ctx.now);
            // Nor is the ACK timeout due: the responder is working through our requests in
            // order, and asks for what is missing (`ask_again_if_lost`) queue behind them.
            // Against a responder slower than the requests (a 1 MiB READ each 40 ms), the
            // timeout fired while fresh responses kept coming, and each expiry spent a retry
            // and asked every READ again: RETRY_EXC in 0.3 s of steady progress.
            self.restart_ack_timer(ctx.now);
        }
        self.time_reask(ctx.now, psn);
        // Every request before this READ reached the responder.
        self.c.saw(first);
        self.settle(ctx);
        if ends_stream {
            self.ask_again_if_lost(ctx, asked, psn.next(), true);
        }
        Ok(())
    }

    /// Completes, in order, the WQEs at the front whose every response arrived (and the
    /// sends and writes the responder has), and moves `una` to the first response still
    /// missing.
    fn settle(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            self.sq.drain_local_front(ctx);
            let Some(w) = self.sq.front().filter(|w| w.started) else {
                return;
            };
            if w.wr.opcode.is_read_or_atomic() {
                let k = w.next_missing(0, self.c.una);
                if k < w.npkts {
                    let at = w.first_psn.add(k);
                    self.advance_una(ctx, at);
                    return;
                }
            } else if !w.last_psn().before(self.c.seen) {
                // Acknowledged up to `seen` inside it (by an ACK that came while a READ or
                // atomic before it waited): a go-back starts there, not at its start.
                let seen = self.c.seen;
                self.advance_una(ctx, seen);
                return;
            }
            let next = w.last_psn().next();
            self.sq.complete_front(ctx, WcStatus::Success);
            self.advance_una(ctx, next);
        }
    }

    /// The responder answered request `through` up to its response `end`. It answers
    /// requests in order, so READ and atomic responses still missing that were asked for
    /// before are lost: ask for those again. Losses found before a pass has asked again
    /// join it. Only asking again for the oldest missing response is a retry (it spends
    /// retry_cnt and restarts the ACK timer: that is what a peer that never answers
    /// repeats); a first loss further on is not. `known`: the responses are known lost (a
    /// later one came), not only late; the pass's first request is then timed.
    fn ask_again_if_lost(&mut self, ctx: &mut Ctx<'_>, through: u64, end: Psn, known: bool) {
        let una = self.c.una;
        let lost = |w: &crate::qp::SendWqe| w.first_lost(through, end, una);
        let mut started = self.sq.iter().take_while(|w| w.started);
        if !started.clone().any(|w| lost(w).is_some()) || self.dead() {
            return;
        }
        let oldest_lost = started.next().is_some_and(|w| {
            w.wr.opcode.is_read_or_atomic() && lost(w) == Some(w.next_missing(0, una))
        });
        let retry = oldest_lost && !self.cur.repairing;
        if retry {
            if self.c.retries_left == 0 {
                self.c.counts.bump(Counter::RetryExceeded);
                self.sq.fail_front(ctx, WcStatus::RetryExcErr);
                return;
            }
            self.c.retries_left -= 1;
            self.c.counts.bump(Counter::CompleterRetry);
        }
        self.cmd(ReqCmd::Repair { through, end });
        self.c.time_repair = known;
        if retry {
            // Unlike a go-back, the pass sends nothing the responder has not executed (a
            // READ or atomic asked again is a duplicate to it), so it draws no NAK: one that
            // comes is a loss of its own, and goes back at once.
            self.restart_ack_timer(ctx.now);
        }
    }

    /// The responses still missing of the READ or atomic at the front, which an ACK for a
    /// later PSN passed a probe timeout ago: asked for again, as a loss a later response
    /// shows is.
    fn ask_again_passed(&mut self, ctx: &mut Ctx<'_>) {
        let Some(w) = self
            .sq
            .front()
            .filter(|w| w.started && w.wr.opcode.is_read_or_atomic())
        else {
            return;
        };
        let (through, end) = (w.asked, w.first_psn.add(w.npkts));
        self.ask_again_if_lost(ctx, through, end, false);
    }

    /// An atomic's ACK, placed in whichever outstanding atomic it answers (see
    /// `read_response`).
    fn atomic_ack(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
        const UNEXPECTED: Result<(), RxDrop> = Err(RxDrop::UnexpectedResponse);
        let psn = pkt.bth.psn;
        let (una, dead) = (self.c.una, self.dead());
        let found = self
            .sq
            .iter_mut()
            .find(|w| w.wr.opcode.is_atomic() && w.holds(psn));
        let (Some(w), Some(ack)) = (found, pkt.ext.atomic_ack_eth) else {
            self.stray_response(ctx, psn);
            return UNEXPECTED;
        };
        if !w.awaits_response(una) {
            return Err(RxDrop::StaleResponse);
        }
        // The original value lands in the local buffer in host byte order, like a CPU load.
        if dead || !scatter(&w.segs, 0, &ack.original.to_ne_bytes()) {
            return UNEXPECTED;
        }
        let asked = w.asked;
        if psn == una {
            self.advance_una(ctx, psn.next());
        } else {
            w.arrived.insert(0);
        }
        self.c.saw(psn);
        self.time_reask(ctx.now, psn);
        self.settle(ctx);
        self.ask_again_if_lost(ctx, asked, psn.next(), true);
        Ok(())
    }

    /// Timer expiries: local ACK timeout, the end of an RNR wait, a tail-loss probe, and
    /// pacing's next packet.
    pub(crate) fn handle_timers(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut fired = false;
        if self.c.timers.is_expired(Timer::Pace, ctx.now) {
            self.c.timers.stop(Timer::Pace);
            fired = true;
        }
        if self.c.timers.is_expired(Timer::RnrWait, ctx.now) {
            self.c.timers.stop(Timer::RnrWait);
            self.cmd(ReqCmd::Rewind(self.c.rnr_psn));
            self.restart_ack_timer(ctx.now);
            fired = true;
        }
        if self.c.timers.is_expired(Timer::Probe, ctx.now) {
            fired = true;
            self.c.timers.stop(Timer::Probe);
            if self.c.passed {
                self.c.probes += 1;
                self.c.counts.bump(Counter::Probes);
                self.c.read_probed(self.c.una);
                self.ask_again_passed(ctx);
                self.arm_probe(ctx.now);
            } else if self.c.una != self.cur.high_psn && self.c.rnr_wait().is_none() {
                self.c.probes += 1;
                self.c.counts.bump(Counter::Probes);
                if self.c.srtt.is_none() {
                    if let Some((p, _)) = self.c.rtt_sample {
                        self.c.probed_sample = Some((p, ctx.now));
                    }
                }
                let (sends, target) = self.next_probe(self.c.probes);
                if target.is_some_and(|w| w.wr.opcode == WrOpcode::RdmaRead) {
                    self.c.read_probed(self.c.una);
                }
                match sends {
                    ProbeSends::Lost => {
                        // Nothing moved for this stall's probe timeouts: past SRTT +
                        // 4 RTTVAR, what was sent last is lost too (a resend lost again).
                        let waited = u64::from(self.c.probes) * self.probe_timeout();
                        let overdue = self.c.srtt.is_some_and(|s| waited > s + 4 * self.c.rttvar);
                        if let Some(sb) = self.c.sb.as_mut() {
                            sb.probe_lost(overdue);
                        }
                    }
                    ProbeSends::Oldest => {
                        self.c.oldest_probed = true;
                        self.cmd(ReqCmd::ProbeOldest);
                    }
                    ProbeSends::Last { from_una } => self.cmd(ReqCmd::Probe {
                        beyond_gap: from_una,
                    }),
                }
                self.arm_probe(ctx.now);
            }
        }
        if self.c.timers.is_expired(Timer::Retransmit, ctx.now) {
            fired = true;
            if self.c.una == self.cur.high_psn {
                self.c.timers.stop(Timer::Retransmit);
            } else {
                self.c.counts.bump(Counter::LocalAckTimeout);
                let una = self.c.una;
                self.retry(ctx, una);
                self.c.time_resend = self.c.srtt.is_none();
            }
        }
        fired
    }

    /// How long the requester waits for progress before it sends again: the local ACK
    /// timeout, or RFC 6298's retransmission timeout (SRTT + 4 RTTVAR) where the path is
    /// slower than that (a 50 ms path whose queue adds 100 ms answers after 150 ms, while
    /// timeout 14 waits 67 ms: every expiry there would spend a retry on a path that is
    /// only slow, and send the window again into its queue). None: timeout 0, wait
    /// forever.
    fn retransmit_timeout(&self) -> Option<Nanos> {
        let c = &self.c;
        let floor = c.srtt.map_or(0, |s| s + 4 * c.rttvar);
        self.q.ack_timeout.map(|t| t.max(floor))
    }

    /// (Re)starts the local ACK timeout from `now` (timeout 0: it never fires).
    fn restart_ack_timer(&mut self, now: Nanos) {
        let at = self.retransmit_timeout().map(|t| now + t);
        self.c.timers.set_or_stop(Timer::Retransmit, at);
    }

    /// How long to wait for progress before a tail-loss probe: three smoothed RTTs (at least
    /// 20 us; 1 ms before the first sample), plus the time a peer may hold its ACK for its
    /// answer when this is our one message out (a ping-pong's), and never more than half the
    /// ACK timeout.
    fn probe_timeout(&self) -> Nanos {
        let pto = self.c.srtt.map_or(1_000_000, |s| (3 * s).max(20_000));
        let mut started = self.sq.iter().take_while(|w| w.started);
        let one_out = started.next().is_some() && started.next().is_none();
        let pto = if one_out { pto + PEER_MAY_HOLD } else { pto };
        self.retransmit_timeout().map_or(pto, |t| pto.min(t / 2))
    }

    /// What the tail-loss probe numbered `probe` (from 1) in this stall sends, and the WQE
    /// its first packet belongs to.
    fn next_probe(&self, probe: u8) -> (ProbeSends, Option<&SendWqe>) {
        let una = self.c.una;
        let held = self.c.sb.as_ref().map(Scoreboard::any_held);
        let resending = self.cur.next_psn != self.cur.high_psn;
        let wqe = |psn: Psn| {
            self.sq
                .iter()
                .take_while(|w| w.started)
                .find(|w| w.holds(psn))
        };
        let at_una = wqe(una);
        // Where the responder holds everything, nothing is lost: the ACK that would say so
        // was, or a READ's or atomic's response. The packet at `una` draws it again.
        let lost = |sb: &Scoreboard| sb.is_packet(una) && !sb.all_held();
        if held == Some(true) && self.c.sb.as_ref().is_some_and(lost) {
            return (ProbeSends::Lost, at_una);
        }
        // A READ whose responses stopped: the rest of it, alone (a go-back pass from `una`
        // would ask every READ after it again too).
        if at_una.is_some_and(|w| self.read_stopped(w)) && self.c.srtt.is_some() {
            return (ProbeSends::Oldest, at_una);
        }
        let mut from_una = resending || held == Some(true);
        // The send queue is walked for the newest WQE only where it may be probed (this
        // runs at every packet sent while a READ or atomic is outstanding: `arm_probe`).
        let newest = (!from_una).then(|| wqe(self.cur.high_psn.sub(1))).flatten();
        // Go-back-N whose window shrank below what is outstanding: the last packet sent
        // may not go again (and sent nothing, so that probes sent only the packet at
        // `una`, a packet per two probe timeouts: seed 1036 of `sim --selective-repeat 0
        // --loss 0.05` crawled so for 300 ms); the go-back from `una` may. A READ's PSNs
        // past the window are no packet: its request lies at its first.
        from_una |= held.is_none()
            && !newest.is_some_and(|w| w.wr.opcode == WrOpcode::RdmaRead)
            && una.distance_to(self.cur.high_psn) > self.c.window();
        let last = if from_una { at_una } else { newest };
        let read = last.is_some_and(|w| w.wr.opcode == WrOpcode::RdmaRead);
        // The packet at `una` alone (if that replays nothing):
        // - go-back-N, and the first probe drew nothing: a responder that NAKed a gap once
        //   drops what follows it, the probed last packet too, until the gap fills. That
        //   packet fills it or, if the responder has it, draws an ACK saying how far it got
        //   (a go-back here resent the window at every stall where a slow rxe's ACKs
        //   lagged: 16x the packets);
        // - the last packet is a READ or atomic the responder would replay (before, no
        //   probe went, and such a stall took the ACK timeout). Under selective repeat the
        //   ACK's SACK then shows what is lost. Under go-back-N, with no SACK, an ACK of
        //   that packet alone cannot tell a rest the responder dropped from one a slow rxe
        //   has not reached yet: going back on that ACK at once sent a 380-packet window
        //   again, and 127 atomics. So the go-back waits for the next probe, a probe
        //   timeout in which nothing more came (`answered_alone`); probing one packet at a
        //   time instead moved `una` a packet a probe timeout (seed 1050 at 1 % loss).
        let una_replays = at_una.is_some_and(|w| self.replays(w));
        let gbn_again = held.is_none() && probe >= 2 && !read;
        let instead = last.is_some_and(|w| self.replays(w));
        if (gbn_again || instead) && !una_replays {
            if instead && held.is_none() && self.c.answered_alone {
                return (ProbeSends::Last { from_una: true }, at_una);
            }
            return (ProbeSends::Oldest, at_una);
        }
        // The last packet sent; from `una` if a resend is under way, the responder holds
        // packets beyond a gap, or the last packet is a READ's request (asked for again
        // whole: `replays` lets only the oldest through).
        (
            ProbeSends::Last {
                from_una: from_una || read,
            },
            last,
        )
    }

    /// `w` is the oldest READ and some of its responses came, up to `una` or beyond a gap
    /// there; if none has come since the probe was armed (each one re-arms it), they
    /// stopped: its tail was lost, or the responder paused (it serves other QPs; a
    /// lossless simulator run saw 138 us). What is asked for again runs from `una` to the
    /// next response that came (`read_request`): nothing that arrived comes twice.
    fn read_stopped(&self, w: &SendWqe) -> bool {
        let una = self.c.una;
        w.wr.opcode == WrOpcode::RdmaRead && w.holds(una) && w.any_response(una)
    }

    /// Whether sending `w`'s request again would make the responder replay what it
    /// answered (see `arm_probe`).
    fn replays(&self, w: &SendWqe) -> bool {
        let una = self.c.una;
        let oldest_unanswered = w.first_psn == una && !w.any_response(una);
        match w.wr.opcode {
            WrOpcode::RdmaRead => {
                (self.c.srtt.is_none() && !self.c.prompt)
                    || !(oldest_unanswered || self.read_stopped(w))
            }
            op if op.is_atomic() => !oldest_unanswered,
            _ => false,
        }
    }

    /// (Re)arms the tail-loss probe while packets are outstanding.
    /// A probe that would send a READ or atomic request again goes only for the oldest
    /// request outstanding, with no response yet, or a READ whose responses stopped: the
    /// responder replays what it answered (rxe drops the READ stream it was sending for the
    /// piece asked), and against a slow peer probing READs multiplied READ traffic
    /// twentyfold. So a READ is asked for again whole or from where its responses stopped,
    /// and only once an RTT sample exists or the peer answered promptly (`prompt`; before,
    /// the timeout is a guess); an atomic is answered from the responder's replay. Other
    /// losses of READs and atomics are found by the gap in the responses, an ACK past them
    /// (`passed`) or the ACK timeout. A READ or atomic further back is no matter: the probe
    /// sends a later packet.
    pub(crate) fn arm_probe(&mut self, now: Nanos) {
        // Per packet sent: what the probe sends (found by walking the send queue) only
        // matters when a READ or atomic is outstanding.
        let asks = self
            .sq
            .iter()
            .take_while(|w| w.started)
            .any(|w| w.wr.opcode.is_read_or_atomic());
        let target = asks.then(|| self.next_probe(self.c.probes + 1).1).flatten();
        let replays = target.is_some_and(|w| self.replays(w));
        // A READ's responses stopped for twice the probe's wait before it is asked again:
        // the responder may only have paused.
        let wait = if target.is_some_and(|w| self.read_stopped(w)) {
            2 * self.probe_timeout()
        } else {
            self.probe_timeout()
        };
        let wait = if target.is_some_and(|w| w.wr.opcode == WrOpcode::RdmaRead) {
            wait.max(self.c.read_wait)
        } else {
            wait
        } << self.c.probes.saturating_sub(1);
        let max = if self.c.srtt.is_some() {
            MAX_PROBES_SAMPLED
        } else {
            MAX_PROBES
        };
        let outstanding = self.c.una != self.cur.high_psn;
        let probe =
            (outstanding && self.c.probes < max && (!replays || self.c.passed)).then(|| now + wait);
        self.c.timers.set_or_stop(Timer::Probe, probe);
    }
}

/// What a tail-loss probe sends.
enum ProbeSends {
    /// Selective repeat, packets held beyond a gap at `una`: what was sent before the
    /// newest packet delivered is lost (`Scoreboard::probe_lost`).
    Lost,
    /// The packet at `una` alone (`ReqCmd::ProbeOldest`).
    Oldest,
    /// The last packet sent again, or from `una` (`ReqCmd::Probe`).
    Last { from_una: bool },
}
