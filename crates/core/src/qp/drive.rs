//! The QP between its requester and completer: each works from a view of the QP and of
//! the other (`InFlight`, `Cursor`), and what one has to tell the other (`Sent`,
//! `ReqCmd`) the QP carries here, after it returns.

use crate::drops::RxDrop;
use crate::qp::completer::{CompView, Completing};
use crate::qp::handoff::{Cursor, Sent};
use crate::qp::requester::{ReqView, Sender};
use crate::qp::{Ctx, Qp};
use crate::verbs::{QpType, WcStatus};
use crate::Nanos;
use oxrdma_wire::PacketRepr;

impl Qp {
    fn req_view(&self) -> ReqView {
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
        }
    }

    fn comp_view(&self) -> CompView {
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
    ) -> (Option<usize>, Option<crate::Gid>) {
        let q = self.req_view();
        let idx = self.req.at(&self.sq);
        let dest = self.sq.get(idx).and_then(|w| w.ud_dest);
        let Some((len, sent)) = self.build_next(ctx, &q, buf) else {
            // Local operations may have completed, or failed.
            self.settle_queue(ctx);
            return (None, dest);
        };
        // A held ACK goes right after this request (`AckHold`).
        self.ack.release();
        let (v, cur) = (self.comp_view(), self.req.cursor());
        self.completing(&v, cur).sent(&sent, ctx.now);
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
    fn build_next(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &ReqView,
        buf: &mut [u8],
    ) -> Option<(usize, Sent)> {
        let resend = {
            let mut s = Sender::new(&mut self.req, q, &mut self.sq, self.comp.in_flight(ctx.now));
            if let Some(built) = s.next_middle(ctx.now, buf) {
                return Some(built);
            }
            s.may_resend()
        };
        if resend {
            if let Some(psn) = self.comp.take_lost() {
                let mut s =
                    Sender::new(&mut self.req, q, &mut self.sq, self.comp.in_flight(ctx.now));
                if let Some(built) = s.resend(psn, ctx.now, buf) {
                    return Some(built);
                }
            }
        }
        Sender::new(&mut self.req, q, &mut self.sq, self.comp.in_flight(ctx.now))
            .next_request(ctx, buf)
    }

    /// The completer at work on this QP, with the requester's cursor `cur`.
    fn completing<'a>(&'a mut self, v: &'a CompView, cur: Cursor) -> Completing<'a> {
        Completing {
            c: &mut self.comp,
            q: v,
            sq: &mut self.sq,
            cur,
        }
    }

    /// The requester does what the completer asked, in order.
    fn apply_cmds(&mut self, now: Nanos) {
        let q = self.req_view();
        while let Some(cmd) = self.comp.take_cmd() {
            Sender::new(&mut self.req, &q, &mut self.sq, self.comp.in_flight(now)).apply(cmd);
        }
    }

    /// A response-type packet (ACK, READ response, atomic ACK) for this QP's requester.
    /// Err says why it was dropped.
    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RxDrop> {
        let (v, cur) = (self.comp_view(), self.req.cursor());
        let r = self.completing(&v, cur).handle_response(ctx, pkt);
        self.apply_cmds(ctx.now);
        self.settle_queue(ctx);
        r
    }

    /// Timer expiries: the completer's (ACK timeout, RNR wait, probe) and the end of an
    /// ACK hold (no request took the ACK along: it goes alone). True if any fired.
    pub(crate) fn handle_timers(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let held = self.ack.expire(ctx.now);
        let (v, cur) = (self.comp_view(), self.req.cursor());
        let fired = self.completing(&v, cur).handle_timers(ctx);
        self.apply_cmds(ctx.now);
        self.settle_queue(ctx);
        held || fired
    }
}
