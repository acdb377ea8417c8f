//! The completer: processes ACKs, NAKs, READ responses and atomic ACKs, completes send WQEs
//! in order, and drives retransmission (NAK, timeout, RNR).

use crate::drops::RxDrop;
use crate::mr::scatter;
use crate::qp::{Ctx, Qp};
use crate::timers::{Timer, TimerTable};
use crate::verbs::{QpState, WcStatus, WrOpcode};
use crate::Nanos;
use oxrdma_wire::aeth::rnr_timer_micros;
use oxrdma_wire::{NakCode, Operation, PacketRepr, Psn, Syndrome};

/// Tail-loss probes per stall before only the ACK timeout is left.
const MAX_PROBES: u8 = 2;

/// What the completer owns: how far the peer has acknowledged, the retry budgets, and
/// every retransmission deadline. The requester reads `una` and the ACK timer through the
/// methods below.
#[derive(Debug, Default)]
pub(crate) struct Completer {
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
    /// Tail-loss probes sent in this stall (the Probe timer resends from `una` if nothing
    /// has moved, without spending retry_cnt: a lost last packet or ACK would otherwise wait
    /// a whole ACK timeout).
    probes: u8,
    /// While there is no RTT estimate: the timed packet a probe made ambiguous, and when
    /// the probe left (see `Qp::rtt_sample_for`).
    probed_sample: Option<(Psn, Nanos)>,
}

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

    pub(crate) fn ack_timer_running(&self) -> bool {
        self.timers.is_running(Timer::Retransmit)
    }

    pub(crate) fn stop_timers(&mut self) {
        self.timers.stop_all();
    }

    /// Holds the responder's positive ACK back until `until` (`Qp::hold_ack`), unless one
    /// is held already.
    pub(crate) fn hold_ack(&mut self, until: Nanos) {
        if !self.ack_held() {
            self.timers.set(Timer::AckHold, until);
        }
    }

    /// Whether a positive ACK is held back.
    pub(crate) fn ack_held(&self) -> bool {
        self.timers.is_running(Timer::AckHold)
    }

    /// Lets a held ACK go.
    pub(crate) fn release_ack(&mut self) {
        self.timers.stop(Timer::AckHold);
    }

    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.timers.next()
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

impl Qp {
    /// A response-type packet (ACK, READ response, atomic ACK) for this QP's requester.
    /// Err says why it was dropped.
    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RxDrop> {
        if self.state != QpState::Rts && self.state != QpState::Sqd {
            return Err(RxDrop::QpState);
        }
        let psn = pkt.bth.psn;
        let outstanding = self.comp.una.distance_to(self.req.high_psn());
        if !psn.in_window(self.comp.una, outstanding) {
            return Err(RxDrop::StaleResponse);
        }
        let info = pkt.bth.opcode.info().map_err(|_| RxDrop::Malformed)?;
        let result = match (info.operation, pkt.ext.aeth.map(|a| a.syndrome)) {
            (Operation::Acknowledge, Some(Syndrome::Ack { .. })) => {
                self.ack_through(ctx, psn);
                Ok(())
            }
            (Operation::Acknowledge, Some(Syndrome::RnrNak { timer })) => {
                self.ack_before(ctx, psn);
                self.rnr_nak(ctx, psn, timer);
                Ok(())
            }
            (Operation::Acknowledge, Some(Syndrome::Nak(NakCode::PsnSequenceError))) => {
                self.ack_before(ctx, psn);
                if self.state == QpState::Err || self.rnr_waiting_at() == Some(psn) {
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
                self.ack_before(ctx, psn);
                if self.sq.front().is_some_and(|w| w.holds(psn)) {
                    self.complete_front(ctx, nak_status(code));
                    self.enter_error(ctx, None);
                }
                Ok(())
            }
            (Operation::ReadResponse, _) => self.read_response(ctx, pkt),
            (Operation::AtomicAcknowledge, _) => self.atomic_ack(ctx, pkt),
            _ => Err(RxDrop::UnexpectedResponse),
        };
        self.drain_local_front(ctx);
        self.report_local_errors(ctx);
        result
    }

    /// Everything up to and including `psn` is acknowledged (an ACK). An ACK past a READ
    /// or atomic still missing responses is no sign that they were lost: the ACK of a
    /// duplicate request carries the newest PSN, ahead of responses the responder is still
    /// replaying (rxe does the same). Later responses, or the ACK timeout, tell.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        self.comp.saw(psn.next());
        self.settle(ctx);
        let waits = self.sq.front().is_some_and(|w| {
            w.started && w.wr.opcode.is_read_or_atomic() && !psn.before(w.first_psn)
        });
        if !waits {
            self.advance_una(ctx, psn.next());
        }
    }

    /// Everything before `psn` is acknowledged (a NAK's implicit ACK).
    fn ack_before(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn != self.comp.una {
            self.ack_through(ctx, psn.sub(1));
        }
    }

    /// Records progress up to (not including) `una`: retry budgets refill, the timer
    /// restarts.
    fn advance_una(&mut self, ctx: &Ctx<'_>, una: Psn) {
        if !self.comp.una.before(una) {
            return;
        }
        if let Some(sample) = self.rtt_sample_for(ctx.now, una) {
            self.comp.srtt = Some(self.comp.srtt.map_or(sample, |s| (7 * s + sample) / 8));
        }
        self.comp.una = una;
        self.comp.probes = 0;
        self.comp.retry_psn = None;
        if self.rnr_waiting_at().is_some_and(|p| p.before(una)) {
            // The PSN that met RNR got through after all (a late copy found a receive).
            self.comp.timers.stop(Timer::RnrWait);
        }
        self.comp.refill_retries(self.retry_cnt, self.rnr_retry);
        if self.req.next_psn().before(una) {
            // An ACK for packets we are about to resend: skip them.
            self.seek(una);
        }
        let deadline = if una == self.req.high_psn() {
            None
        } else {
            self.ack_timeout().map(|t| ctx.now + t)
        };
        self.comp.timers.set_or_stop(Timer::Retransmit, deadline);
        self.arm_probe(ctx.now);
    }

    /// The RTT sample an ACK up to `una` gives, if any. Karn's rule: only packets sent once
    /// are timed. One exception breaks a trap: if the first probe timeout is shorter than
    /// the peer's RTT (a slow VM, a long path), every timed packet is probed before its ACK
    /// and no estimate would ever form. So, while there is none, an ACK for a probed packet
    /// is timed from the probe: exact if it answers the probe, short by at most the probe
    /// timeout if it answers the original.
    fn rtt_sample_for(&mut self, now: Nanos, una: Psn) -> Option<Nanos> {
        if let Some(sent) = self.req.take_sample_before(una) {
            return Some(now.saturating_sub(sent));
        }
        let c = &mut self.comp;
        let (_, probe) = c.probed_sample.filter(|&(p, _)| p.before(una))?;
        c.probed_sample = None;
        c.srtt.is_none().then(|| now.saturating_sub(probe))
    }

    /// Resends from `from`, if the retry budget allows; otherwise fails the front WQE.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, from: Psn) {
        if self.comp.retries_left == 0 {
            self.complete_front(ctx, WcStatus::RetryExcErr);
            self.enter_error(ctx, None);
            return;
        }
        self.comp.retries_left -= 1;
        self.rewind(from);
        self.restart_ack_timer(ctx.now);
        // What this resends may arrive out of order and draw a NAK: that is no new loss.
        self.comp.retry_psn = Some((self.comp.una, ctx.now));
    }

    /// A PSN-sequence NAK, or a response no outstanding READ or atomic explains: go back
    /// to `una`, once per burst (a burst lasts a probe timeout: what still arrives after
    /// that answers the go-back's own requests, so what it asked for first was lost again).
    fn go_back_once(&mut self, ctx: &mut Ctx<'_>) {
        let una = self.comp.una;
        let again_at = |at: Nanos| at + self.probe_timeout();
        if !matches!(self.comp.retry_psn, Some((p, at)) if p == una && ctx.now < again_at(at)) {
            self.retry(ctx, una);
        }
    }

    fn rnr_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, timer: u8) {
        if self.state == QpState::Err || !self.sq.front().is_some_and(|w| w.holds(psn)) {
            return;
        }
        if self.comp.rnr_retries_left == 0 {
            self.complete_front(ctx, WcStatus::RnrRetryExcErr);
            self.enter_error(ctx, None);
            return;
        }
        if self.rnr_retry != 7 {
            self.comp.rnr_retries_left -= 1;
        }
        let wait = u64::from(rnr_timer_micros(timer)) * 1000;
        self.comp.timers.set(Timer::RnrWait, ctx.now + wait);
        self.comp.rnr_psn = psn;
        self.comp.timers.stop(Timer::Retransmit);
    }

    /// A response at `psn` that no outstanding READ or atomic of ours explains (it is
    /// dropped): sends and writes before it were implicitly acknowledged, unless a READ or
    /// atomic at the front still waits, whose responses it then shows lost.
    fn stray_response(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn == self.comp.una {
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
        if self.state == QpState::Err {
            return UNEXPECTED;
        }
        let mtu = self.mtu.bytes() as u64;
        let una = self.comp.una;
        let w = &mut self.sq[k];
        let i = w.first_psn.distance_to(psn);
        if w.next_missing(i, una) != i {
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
        }
        // Every request before this READ reached the responder.
        self.comp.saw(first);
        self.settle(ctx);
        if ends_stream {
            self.ask_again_if_lost(ctx, asked, psn.next());
        }
        Ok(())
    }

    /// Completes, in order, the WQEs at the front whose every response arrived (and the
    /// sends and writes the responder has), and moves `una` to the first response still
    /// missing.
    fn settle(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            self.drain_local_front(ctx);
            let Some(w) = self.sq.front().filter(|w| w.started) else {
                return;
            };
            if w.wr.opcode.is_read_or_atomic() {
                let k = w.next_missing(0, self.comp.una);
                if k < w.npkts {
                    let at = w.first_psn.add(k);
                    self.advance_una(ctx, at);
                    return;
                }
            } else if !w.last_psn().before(self.comp.seen) {
                return;
            }
            let next = w.last_psn().next();
            self.complete_front(ctx, WcStatus::Success);
            self.advance_una(ctx, next);
        }
    }

    /// The responder answered request `through` up to its response `end`. It answers
    /// requests in order, so READ and atomic responses still missing that were asked for
    /// before are lost: ask for those again. Losses found before a pass has asked again
    /// join it. Only asking again for the oldest missing response is a retry (it spends
    /// retry_cnt and restarts the ACK timer: that is what a peer that never answers
    /// repeats); a first loss further on is not.
    fn ask_again_if_lost(&mut self, ctx: &mut Ctx<'_>, through: u64, end: Psn) {
        let una = self.comp.una;
        let lost = |w: &crate::qp::SendWqe| w.first_lost(through, end, una);
        let mut started = self.sq.iter().take_while(|w| w.started);
        if !started.clone().any(|w| lost(w).is_some()) || self.state == QpState::Err {
            return;
        }
        let oldest_lost = started.next().is_some_and(|w| {
            w.wr.opcode.is_read_or_atomic() && lost(w) == Some(w.next_missing(0, una))
        });
        let retry = oldest_lost && !self.repairing();
        if retry {
            if self.comp.retries_left == 0 {
                self.complete_front(ctx, WcStatus::RetryExcErr);
                self.enter_error(ctx, None);
                return;
            }
            self.comp.retries_left -= 1;
        }
        self.repair(through, end);
        if retry {
            self.restart_ack_timer(ctx.now);
            // A NAK drawn by what the pass resends is no new loss (see `retry`).
            self.comp.retry_psn = Some((una, ctx.now));
        }
    }

    /// An atomic's ACK, placed in whichever outstanding atomic it answers (see
    /// `read_response`).
    fn atomic_ack(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
        const UNEXPECTED: Result<(), RxDrop> = Err(RxDrop::UnexpectedResponse);
        let psn = pkt.bth.psn;
        let una = self.comp.una;
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
        if self.state == QpState::Err || !scatter(&w.segs, 0, &ack.original.to_ne_bytes()) {
            return UNEXPECTED;
        }
        let asked = w.asked;
        if psn == una {
            self.advance_una(ctx, psn.next());
        } else {
            w.arrived.insert(0);
        }
        self.comp.saw(psn);
        self.settle(ctx);
        self.ask_again_if_lost(ctx, asked, psn.next());
        Ok(())
    }

    /// Timer expiries: local ACK timeout, the end of an RNR wait, a tail-loss probe, and
    /// the end of an ACK hold.
    pub(crate) fn handle_timers(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut fired = false;
        if self.comp.timers.is_expired(Timer::AckHold, ctx.now) {
            // No request took the held ACK along: it goes alone.
            self.comp.release_ack();
            fired = true;
        }
        if self.comp.timers.is_expired(Timer::RnrWait, ctx.now) {
            self.comp.timers.stop(Timer::RnrWait);
            self.rewind(self.comp.rnr_psn);
            self.restart_ack_timer(ctx.now);
            fired = true;
        }
        if self.comp.timers.is_expired(Timer::Probe, ctx.now) {
            fired = true;
            self.comp.timers.stop(Timer::Probe);
            if self.comp.una != self.req.high_psn() && self.rnr_waiting_at().is_none() {
                self.comp.probes += 1;
                if self.comp.srtt.is_none() {
                    if let Some(p) = self.req.timed_psn() {
                        self.comp.probed_sample = Some((p, ctx.now));
                    }
                }
                // The last packet sent, again (it asks for an ACK): the ACK says how far
                // the peer got, or the NAK where a gap begins. From `una` if a resend is
                // already under way.
                let from = if self.req.resending() {
                    self.comp.una
                } else {
                    self.req.high_psn().sub(1)
                };
                self.rewind(from);
                self.arm_probe(ctx.now);
            }
        }
        if self.comp.timers.is_expired(Timer::Retransmit, ctx.now) {
            fired = true;
            if self.comp.una == self.req.high_psn() {
                self.comp.timers.stop(Timer::Retransmit);
            } else {
                let una = self.comp.una;
                self.retry(ctx, una);
            }
        }
        fired
    }

    /// (Re)starts the local ACK timeout from `now` (timeout 0: it never fires).
    pub fn restart_ack_timer(&mut self, now: Nanos) {
        let at = self.ack_timeout().map(|t| now + t);
        self.comp.timers.set_or_stop(Timer::Retransmit, at);
    }

    /// The PSN an RNR NAK made us wait to resend, while we wait.
    pub fn rnr_waiting_at(&self) -> Option<Psn> {
        self.comp
            .timers
            .is_running(Timer::RnrWait)
            .then_some(self.comp.rnr_psn)
    }

    /// How long to wait for progress before a tail-loss probe: three smoothed RTTs (at least
    /// 20 us; 1 ms before the first sample), and never more than half the ACK timeout.
    pub fn probe_timeout(&self) -> Nanos {
        let pto = self.comp.srtt.map_or(1_000_000, |s| (3 * s).max(20_000));
        self.ack_timeout().map_or(pto, |t| pto.min(t / 2))
    }

    /// (Re)arms the tail-loss probe while packets are outstanding.
    /// Not while a READ or atomic is outstanding: a probe re-requests it, and the responder
    /// then replays the whole remaining response (rxe does) — against a slow peer that
    /// multiplied READ traffic twentyfold. Their losses are found by the gap in the
    /// responses or, at the tail, by the ACK timeout.
    pub fn arm_probe(&mut self, now: Nanos) {
        let reading = self
            .sq
            .iter()
            .take_while(|w| w.started)
            .any(|w| w.wr.opcode.is_read_or_atomic());
        let outstanding = self.comp.una != self.req.high_psn();
        let probe = (outstanding && self.comp.probes < MAX_PROBES && !reading)
            .then(|| now + self.probe_timeout());
        self.comp.timers.set_or_stop(Timer::Probe, probe);
    }
}
