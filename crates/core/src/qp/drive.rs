//! The QP between its requester and completer: each works from a view of the QP and of
//! the other (`InFlight`, `Cursor`), and what one has to tell the other (`Sent`,
//! `ReqCmd`) the QP carries here, after it returns.

use crate::counters::Counters;
use crate::drops::RxDrop;
use crate::qp::completer::{CompView, Completing};
use crate::qp::handoff::{Cursor, Sent};
use crate::qp::requester::{ReqView, Sender};
use crate::qp::{Ctx, Qp};
use crate::verbs::{QpType, WcStatus};
use crate::Nanos;
use oxrdma_wire::{PacketRepr, Run};

impl Qp {
    /// Rebuilds the views the requester and completer decide from (`rview`, `cview`):
    /// after any attribute they hold changes (state, modify, the device's settings).
    pub(crate) fn refresh_views(&mut self) {
        self.rview = self.req_view();
        self.cview = self.comp_view();
    }

    pub(crate) fn req_view(&self) -> ReqView {
        ReqView {
            state: self.state,
            qp_type: self.qp_type,
            mtu: self.mtu,
            pd: self.pd,
            qpn: self.qpn,
            dest_qpn: self.dest_qpn,
            qkey: self.qkey,
            max_rd_atomic: self.max_rd_atomic,
            selective_repeat: self.selective_repeat,
            sealed: self.secure.is_some(),
        }
    }

    pub(crate) fn comp_view(&self) -> CompView {
        CompView {
            state: self.state,
            mtu: self.mtu,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            ack_timeout: self.ack_timeout(),
            selective_repeat: self.selective_repeat,
        }
    }

    /// The next request packet, written into `buf`; returns its length, and its destination
    /// when that is not the connected peer (UD).
    pub(crate) fn next_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> (Option<usize>, Option<crate::attr::AddressVector>) {
        let idx = self.req.at(&self.sq);
        if idx >= self.sq.len() && !self.comp.has_lost() {
            // Nothing taken is unsent, and nothing is lost: most calls, asked after each
            // event whether the QP has more.
            return (None, None);
        }
        debug_assert!(
            self.views_fresh(),
            "a QP attribute changed without refresh_views"
        );
        let dest = self.sq.get(idx).and_then(|w| w.ud_dest);
        let Some((len, sent)) = self.build_next(ctx, buf) else {
            // Local operations may have completed, or failed.
            self.settle_queue(ctx);
            return (None, dest);
        };
        // A held ACK goes right after this request (`AckHold`).
        self.ack.release();
        let cur = self.req.cursor();
        self.completing(cur).sent(&sent, ctx.now);
        if self.qp_type != QpType::Rc {
            // Unreliable: nothing waits for an ACK. A WQE is done once its last packet left.
            self.comp.unreliable_sent(self.req.next_psn());
            if self.req.at(&self.sq) > idx {
                self.sq.complete_front(ctx, WcStatus::Success);
            }
        }
        self.settle_queue(ctx);
        (Some(len), dest)
    }

    /// Builds the next request packet: the next MIDDLE packet of a message under way (most
    /// packets are, so it is asked first), else a packet found lost, else the packet at
    /// the cursor.
    fn build_next(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<(usize, Sent)> {
        {
            let mut s = Sender::new(
                &mut self.req,
                &self.rview,
                &mut self.sq,
                self.comp.in_flight(ctx.now),
            );
            if let Some(built) = s.next_middle(ctx.now, buf) {
                return Some(built);
            }
            if !s.may_resend() {
                return s.next_request(ctx, buf);
            }
        }
        if let Some(psn) = self.comp.take_lost() {
            let mut s = Sender::new(
                &mut self.req,
                &self.rview,
                &mut self.sq,
                self.comp.in_flight(ctx.now),
            );
            if let Some(built) = s.resend(psn, ctx.now, buf) {
                return Some(built);
            }
        }
        Sender::new(
            &mut self.req,
            &self.rview,
            &mut self.sq,
            self.comp.in_flight(ctx.now),
        )
        .next_request(ctx, buf)
    }

    /// Whether the cached views still say what the QP's attributes say.
    fn views_fresh(&self) -> bool {
        self.rview == self.req_view() && self.cview == self.comp_view()
    }

    /// The completer at work on this QP, with the requester's cursor `cur`.
    pub(super) fn completing(&mut self, cur: Cursor) -> Completing<'_> {
        Completing {
            c: &mut self.comp,
            q: &self.cview,
            sq: &mut self.sq,
            cur,
        }
    }

    /// The requester does what the completer asked, in order.
    fn apply_cmds(&mut self, now: Nanos) {
        while let Some(cmd) = self.comp.take_cmd() {
            Sender::new(
                &mut self.req,
                &self.rview,
                &mut self.sq,
                self.comp.in_flight(now),
            )
            .apply(cmd);
        }
    }

    /// A response-type packet (ACK, READ response, atomic ACK) for this QP's requester.
    /// Err says why it was dropped.
    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RxDrop> {
        debug_assert!(
            self.views_fresh(),
            "a QP attribute changed without refresh_views"
        );
        let cur = self.req.cursor();
        let r = self.completing(cur).handle_response(ctx, pkt);
        self.apply_cmds(ctx.now);
        self.settle_queue(ctx);
        r
    }

    /// The READ responses after the first of a run (`Run`) at the front of `packets`, each
    /// handled as [`Self::handle_response`] handles it, without being parsed in full or its
    /// QP found again; a dropped one is counted as the per-packet path counts it. Returns
    /// how many it took, and their bytes.
    pub(crate) fn response_run<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        ctx: &mut Ctx<'_>,
        run: &Run,
        packets: &mut std::iter::Peekable<I>,
    ) -> (u64, usize) {
        let (mut taken, mut bytes) = (0, 0);
        while let Some(pkt) = packets.peek().and_then(|p| run.next(p)) {
            bytes += packets.next().map_or(0, <[u8]>::len);
            taken += 1;
            if let Err(why) = self.handle_response(ctx, &pkt) {
                ctx.drop_packet(why);
                self.counts.bump(Counters::drop_counter(why));
            }
        }
        (taken, bytes)
    }

    /// Timer expiries: the completer's (ACK timeout, RNR wait, probe) and the end of an
    /// ACK hold (no request took the ACK along: it goes alone). True if any fired.
    pub(crate) fn handle_timers(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let held = self.ack.expire(ctx.now);
        let cur = self.req.cursor();
        let fired = self.completing(cur).handle_timers(ctx);
        self.apply_cmds(ctx.now);
        self.settle_queue(ctx);
        held || fired
    }
}
