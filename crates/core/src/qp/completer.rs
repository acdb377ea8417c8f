//! The completer: processes ACKs, NAKs, READ responses and atomic ACKs, completes send WQEs
//! in order, and drives retransmission (NAK, timeout, RNR).

use crate::drops::RxDrop;
use crate::mr::scatter;
use crate::qp::requester::WINDOW;
use crate::qp::scoreboard::Scoreboard;
use crate::qp::window::Window;
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
    /// How much the RTT varies (RFC 6298's RTTVAR).
    rttvar: Nanos,
    /// Tail-loss probes sent in this stall (the Probe timer resends from `una` if nothing
    /// has moved, without spending retry_cnt: a lost last packet or ACK would otherwise wait
    /// a whole ACK timeout).
    probes: u8,
    /// While there is no RTT estimate: the timed packet a probe made ambiguous, and when
    /// the probe left (see `Qp::rtt_sample_for`).
    probed_sample: Option<(Psn, Nanos)>,
    /// Once the peer's responses carry the selective-repeat bit: what it holds and what is
    /// lost (until then, and with peers that never set it, go-back-N).
    sb: Option<Scoreboard>,
    /// The send window of selective repeat, from the delivery rate and the RTT floor.
    win: Window,
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

    /// The selective-repeat scoreboard, once the peer speaks it.
    pub(crate) fn scoreboard(&mut self) -> Option<&mut Scoreboard> {
        self.sb.as_mut()
    }

    /// Whether the peer speaks selective repeat.
    pub(crate) fn selective(&self) -> bool {
        self.sb.is_some()
    }

    /// Whether the responder holds packets beyond a gap (selective repeat).
    pub(crate) fn holds_beyond_gap(&self) -> bool {
        self.sb.as_ref().is_some_and(Scoreboard::any_held)
    }

    /// Whether a packet found lost waits to be sent again.
    pub(crate) fn has_lost(&self) -> bool {
        self.sb.as_ref().is_some_and(Scoreboard::has_lost)
    }

    /// Whether the responder holds `psn` (selective repeat).
    pub(crate) fn held(&self, psn: Psn) -> bool {
        self.sb.as_ref().is_some_and(|s| s.holds(psn))
    }

    /// Whether no new packet may be sent: as many are in flight as the window allows
    /// (selective repeat: packets neither held nor lost, against twice the
    /// bandwidth-delay product, and never more PSNs than the responder keeps; go-back-N:
    /// PSNs since `una`, against `WINDOW`).
    pub(crate) fn window_full(&self, next: Psn) -> bool {
        let span = self.una.distance_to(next);
        match &self.sb {
            Some(sb) => span >= SR_SPAN || sb.in_flight() >= self.window(),
            None => span >= WINDOW,
        }
    }

    /// Whether no lost packet may be sent again yet: as many packets are in flight as the
    /// window allows (a resend takes the place of the packet lost, in flight again).
    pub(crate) fn window_full_again(&self) -> bool {
        self.sb
            .as_ref()
            .is_some_and(|sb| sb.in_flight() >= self.window())
    }

    /// Whether sending up to `after` fills the window (the packet asks for an ACK, so the
    /// window opens again as soon as the peer has it).
    pub(crate) fn fills_window(&self, after: Psn) -> bool {
        match &self.sb {
            Some(sb) => sb.in_flight() + 1 >= self.window(),
            None => self.una.distance_to(after) >= WINDOW,
        }
    }

    /// The send window in PSNs.
    pub(crate) fn window(&self) -> u32 {
        match self.sb {
            Some(_) => self.win.size(WINDOW, SR_SPAN),
            None => WINDOW,
        }
    }

    /// The smallest RTT measured (selective repeat sizes its window with it).
    pub(crate) fn min_rtt(&self) -> Option<Nanos> {
        self.win.min_rtt()
    }

    /// Packets resent because selective repeat found them lost.
    pub(crate) fn resent(&self) -> u64 {
        self.sb.as_ref().map_or(0, |s| s.resent)
    }
}

/// PSNs in flight at most under selective repeat: what a responder keeps ahead of a gap,
/// well inside half the 24-bit PSN space.
const SR_SPAN: u32 = crate::qp::responder::MAX_SPAN / 2;

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
        if pkt.bth.selective_repeat && self.selective_repeat && self.comp.sb.is_none() {
            self.start_selective_repeat();
        }
        let info = pkt.bth.opcode.info().map_err(|_| RxDrop::Malformed)?;
        let outstanding = self.comp.una.distance_to(self.req.high_psn());
        let result = match (info.operation, pkt.ext.aeth.map(|a| a.syndrome)) {
            // An ACK of nothing new may still say what the responder holds.
            _ if !psn.in_window(self.comp.una, outstanding) => {
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
        if let Some(sb) = self.comp.sb.as_mut() {
            sb.find_lost();
        }
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

    /// The peer's responses carry the selective-repeat bit: from now on it keeps packets
    /// that arrive ahead of a gap. The scoreboard starts with what is outstanding, one entry
    /// per request packet (a READ's response PSNs are no packets of ours).
    fn start_selective_repeat(&mut self) {
        let (una, high) = (self.comp.una, self.req.high_psn());
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
        self.comp.sb = Some(sb);
    }

    /// The SACK of a selective-repeat ACK: what it shows held; true if it carried one.
    fn sacked(&mut self, ctx: &Ctx<'_>, pkt: &PacketRepr<'_>) -> bool {
        let positive = matches!(pkt.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }));
        let Some(sb) = self.comp.sb.as_mut() else {
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
        self.comp
            .win
            .sample(ctx.now, sb.delivered, sb.found_lost, WINDOW);
        // The timed packet may be held beyond a gap: its RTT is known now, not when the
        // gap fills.
        if let Some(sent) = self.req.take_sample_if(|p| sb.holds(p)) {
            self.comp.rtt_sample(ctx.now.saturating_sub(sent), true);
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
        if let Some((sample, exact)) = self.rtt_sample_for(ctx.now, una) {
            self.comp.rtt_sample(sample, exact);
        }
        self.comp.una = una;
        if let Some(sb) = self.comp.sb.as_mut() {
            sb.acked(una);
            self.comp
                .win
                .sample(ctx.now, sb.delivered, sb.found_lost, WINDOW);
        }
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
            self.retransmit_timeout().map(|t| ctx.now + t)
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
    /// The second value says whether the sample is exact (not timed from a probe).
    fn rtt_sample_for(&mut self, now: Nanos, una: Psn) -> Option<(Nanos, bool)> {
        if let Some(sent) = self.req.take_sample_before(una) {
            return Some((now.saturating_sub(sent), true));
        }
        let c = &mut self.comp;
        let (_, probe) = c.probed_sample.filter(|&(p, _)| p.before(una))?;
        c.probed_sample = None;
        c.srtt.is_none().then(|| (now.saturating_sub(probe), false))
    }

    /// Resends from `from`, if the retry budget allows; otherwise fails the front WQE.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, from: Psn) {
        if self.comp.retries_left == 0 {
            self.complete_front(ctx, WcStatus::RetryExcErr);
            self.enter_error(ctx, None);
            return;
        }
        self.comp.retries_left -= 1;
        let una = self.comp.una;
        match self.comp.sb.as_mut() {
            // Selective repeat: everything the responder does not hold counts as lost, and
            // goes again as the window lets it (a go-back would send it all at once, into
            // the queue that may have lost it).
            Some(sb) if sb.is_packet(una) => sb.mark_all_lost(),
            Some(sb) => {
                // A READ or atomic at the front awaits a response: the go-back asks again.
                sb.forget_lost();
                self.rewind(from);
            }
            None => self.rewind(from),
        }
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
                // already under way. Under selective repeat, with packets held beyond a
                // gap at `una`: what was sent before the newest packet delivered.
                let una = self.comp.una;
                match self.comp.sb.as_mut() {
                    Some(sb) if sb.is_packet(una) && sb.any_held() => sb.probe_lost(),
                    _ => {
                        let from = if self.req.resending() || self.comp.holds_beyond_gap() {
                            una
                        } else {
                            self.req.high_psn().sub(1)
                        };
                        self.rewind(from);
                    }
                }
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

    /// How long the requester waits for progress before it sends again: the local ACK
    /// timeout, or RFC 6298's retransmission timeout (SRTT + 4 RTTVAR) where the path is
    /// slower than that (a 50 ms path whose queue adds 100 ms answers after 150 ms, while
    /// timeout 14 waits 67 ms: every expiry there would spend a retry on a path that is
    /// only slow, and send the window again into its queue). None: timeout 0, wait
    /// forever.
    pub fn retransmit_timeout(&self) -> Option<Nanos> {
        let c = &self.comp;
        let floor = c.srtt.map_or(0, |s| s + 4 * c.rttvar);
        self.ack_timeout().map(|t| t.max(floor))
    }

    /// (Re)starts the local ACK timeout from `now` (timeout 0: it never fires).
    pub fn restart_ack_timer(&mut self, now: Nanos) {
        let at = self.retransmit_timeout().map(|t| now + t);
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
        self.retransmit_timeout().map_or(pto, |t| pto.min(t / 2))
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
