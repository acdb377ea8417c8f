//! The completer: processes ACKs, NAKs, READ responses and atomic ACKs, completes send WQEs
//! in order, and drives retransmission (NAK, timeout, RNR).

use crate::drops::RxDrop;
use crate::mr::scatter;
use crate::qp::{Ctx, Qp};
use crate::timers::Timer;
use crate::verbs::{QpState, WcStatus, WrOpcode};
use oxrdma_wire::aeth::rnr_timer_micros;
use oxrdma_wire::{NakCode, Operation, PacketRepr, Psn, Syndrome};

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
        let outstanding = self.req.una.distance_to(self.req.high_psn);
        if !psn.in_window(self.req.una, outstanding) {
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
                } else if self.req.una == psn {
                    self.retry(ctx, psn);
                } else {
                    // A READ or atomic before the NAKed PSN still lacks its response: resend
                    // from there, never past it.
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

    /// Everything up to and including `psn` is acknowledged.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        loop {
            // Local operations behind what just completed complete now too.
            self.drain_local_front(ctx);
            let Some(w) = self.sq.front() else { break };
            if !w.started || psn.before(w.first_psn) {
                break;
            }
            if w.wr.opcode.is_read_or_atomic() {
                // A later request was acknowledged, so this one's responses were lost.
                self.go_back_once(ctx);
                return;
            }
            if psn.before(w.last_psn()) {
                break;
            }
            let next = w.last_psn().next();
            self.complete_front(ctx, WcStatus::Success);
            self.advance_una(ctx, next);
        }
        self.advance_una(ctx, psn.next());
    }

    /// Everything before `psn` is acknowledged (a NAK's implicit ACK).
    fn ack_before(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn != self.req.una {
            self.ack_through(ctx, psn.sub(1));
        }
    }

    /// Records progress up to (not including) `una`: retry budgets refill, the timer
    /// restarts.
    fn advance_una(&mut self, ctx: &Ctx<'_>, una: Psn) {
        if !self.req.una.before(una) {
            return;
        }
        if let Some(sample) = self.rtt_sample_for(ctx.now, una) {
            self.req.srtt = Some(self.req.srtt.map_or(sample, |s| (7 * s + sample) / 8));
        }
        self.req.una = una;
        self.req.probes = 0;
        self.req.retry_psn = None;
        if self.rnr_waiting_at().is_some_and(|p| p.before(una)) {
            // The PSN that met RNR got through after all (a late copy found a receive).
            self.req.timers.stop(Timer::RnrWait);
        }
        self.req.retries_left = self.retry_cnt;
        self.req.rnr_retries_left = self.rnr_retry;
        if self.req.next_psn.before(una) {
            // An ACK for packets we are about to resend: skip them.
            self.rewind(una);
        }
        let deadline = if una == self.req.high_psn {
            None
        } else {
            self.ack_timeout().map(|t| ctx.now + t)
        };
        self.req.timers.set_or_stop(Timer::Retransmit, deadline);
        self.arm_probe(ctx.now);
    }

    /// The RTT sample an ACK up to `una` gives, if any. Karn's rule: only packets sent once
    /// are timed. One exception breaks a trap: if the first probe timeout is shorter than
    /// the peer's RTT (a slow VM, a long path), every timed packet is probed before its ACK
    /// and no estimate would ever form. So, while there is none, an ACK for a probed packet
    /// is timed from the probe: exact if it answers the probe, short by at most the probe
    /// timeout if it answers the original.
    fn rtt_sample_for(&mut self, now: crate::Nanos, una: Psn) -> Option<crate::Nanos> {
        let r = &mut self.req;
        if let Some((_, sent)) = r.rtt_sample.filter(|&(p, _)| p.before(una)) {
            r.rtt_sample = None;
            return Some(now.saturating_sub(sent));
        }
        let (_, probe) = r.probed_sample.filter(|&(p, _)| p.before(una))?;
        r.probed_sample = None;
        r.srtt.is_none().then(|| now.saturating_sub(probe))
    }

    /// Resends from `from`, if the retry budget allows; otherwise fails the front WQE.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, from: Psn) {
        if self.req.retries_left == 0 {
            self.complete_front(ctx, WcStatus::RetryExcErr);
            self.enter_error(ctx, None);
            return;
        }
        self.req.retries_left -= 1;
        self.rewind(from);
        self.restart_ack_timer(ctx.now);
    }

    /// An out-of-order response means responses were lost: go back to `una`, once per burst.
    fn go_back_once(&mut self, ctx: &mut Ctx<'_>) {
        if self.req.retry_psn != Some(self.req.una) {
            self.req.retry_psn = Some(self.req.una);
            self.retry(ctx, self.req.una);
        }
    }

    fn rnr_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, timer: u8) {
        if self.state == QpState::Err || !self.sq.front().is_some_and(|w| w.holds(psn)) {
            return;
        }
        if self.req.rnr_retries_left == 0 {
            self.complete_front(ctx, WcStatus::RnrRetryExcErr);
            self.enter_error(ctx, None);
            return;
        }
        if self.rnr_retry != 7 {
            self.req.rnr_retries_left -= 1;
        }
        let wait = u64::from(rnr_timer_micros(timer)) * 1000;
        self.req.timers.set(Timer::RnrWait, ctx.now + wait);
        self.req.rnr_psn = psn;
        self.req.timers.stop(Timer::Retransmit);
    }

    /// Lines up a response at `psn` with the completer's expected PSN; false to drop it.
    fn in_order_response(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> bool {
        if psn != self.req.una {
            let front_waits = self
                .sq
                .front()
                .is_some_and(|w| w.wr.opcode.is_read_or_atomic());
            if front_waits {
                self.go_back_once(ctx);
                return false;
            }
            // Sends/writes before it were implicitly acknowledged.
            self.ack_through(ctx, psn.sub(1));
        }
        psn == self.req.una && self.state != QpState::Err
    }

    fn read_response(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
        const UNEXPECTED: Result<(), RxDrop> = Err(RxDrop::UnexpectedResponse);
        let psn = pkt.bth.psn;
        if !self.in_order_response(ctx, psn) {
            return UNEXPECTED;
        }
        let mtu = self.mtu.bytes() as u64;
        let Some(w) = self.sq.front() else {
            return UNEXPECTED;
        };
        if w.wr.opcode != WrOpcode::RdmaRead || !w.holds(psn) {
            return UNEXPECTED;
        }
        let off = u64::from(w.first_psn.distance_to(psn)) * mtu;
        let n = mtu.min(w.len - off);
        let last = off + n == w.len;
        let pos = pkt
            .bth
            .opcode
            .info()
            .map(|i| i.position.ends_message())
            .unwrap_or(false);
        if pkt.payload.len() as u64 != n || pos != last {
            return UNEXPECTED; // does not fit: treat as lost; retransmission will sort it out
        }
        if !scatter(&w.segs, off as usize, pkt.payload) {
            return UNEXPECTED;
        }
        if last {
            self.complete_front(ctx, WcStatus::Success);
        }
        self.advance_una(ctx, psn.next());
        Ok(())
    }

    fn atomic_ack(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
        const UNEXPECTED: Result<(), RxDrop> = Err(RxDrop::UnexpectedResponse);
        let psn = pkt.bth.psn;
        if !self.in_order_response(ctx, psn) {
            return UNEXPECTED;
        }
        let (Some(w), Some(ack)) = (self.sq.front(), pkt.ext.atomic_ack_eth) else {
            return UNEXPECTED;
        };
        if !w.wr.opcode.is_atomic() || w.first_psn != psn {
            return UNEXPECTED;
        }
        // The original value lands in the local buffer in host byte order, like a CPU load.
        if !scatter(&w.segs, 0, &ack.original.to_ne_bytes()) {
            return UNEXPECTED;
        }
        self.complete_front(ctx, WcStatus::Success);
        self.advance_una(ctx, psn.next());
        Ok(())
    }

    /// Timer expiries: local ACK timeout and the end of an RNR wait.
    pub(crate) fn handle_timers(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut fired = false;
        if self.req.timers.is_expired(Timer::RnrWait, ctx.now) {
            self.req.timers.stop(Timer::RnrWait);
            self.rewind(self.req.rnr_psn);
            self.restart_ack_timer(ctx.now);
            fired = true;
        }
        if self.req.timers.is_expired(Timer::Probe, ctx.now) {
            fired = true;
            self.req.timers.stop(Timer::Probe);
            if self.req.una != self.req.high_psn && self.rnr_waiting_at().is_none() {
                self.req.probes += 1;
                if self.req.srtt.is_none() {
                    if let Some((p, _)) = self.req.rtt_sample {
                        self.req.probed_sample = Some((p, ctx.now));
                    }
                }
                let una = self.req.una;
                self.rewind(una);
                self.arm_probe(ctx.now);
            }
        }
        if self.req.timers.is_expired(Timer::Retransmit, ctx.now) {
            fired = true;
            if self.req.una == self.req.high_psn {
                self.req.timers.stop(Timer::Retransmit);
            } else {
                let una = self.req.una;
                self.retry(ctx, una);
            }
        }
        fired
    }
}
