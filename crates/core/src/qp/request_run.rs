//! The send side's run path: the middle packets of a message built in one call, for a
//! driver that takes many packets at once (`Engine::poll_transmit_many`).
//!
//! Each packet is the one the per-packet path would build at that point (`Sender::
//! next_middle`, the first thing it tries) and is recorded as sent the same way; what the
//! per-packet path does again for every packet and this does once is what is left: the
//! QP's turn in the engine, the look at the send queue, the checks and the window's room
//! (`Sender::next_middles`), the completer's records (`Completing::sent_run`), the
//! tail-loss probe (armed from the state after the last packet, as the last of the
//! per-packet calls arms it) and the settling of the send queue (no middle packet
//! completes or fails a WQE). A QP that paces builds the run packet by packet: each packet
//! moves the next one's time. The run stops
//! where the per-packet path could do anything else: at the message's last packet, a full
//! window, pacing, anything lost, and any reply of the responder's waiting to go first.
//! `crates/sim/tests/run_path.rs` checks it against the per-packet path, effect for effect.

use crate::limits::MAX_PACKET;
use crate::qp::requester::{run_gap, Sender};
use crate::qp::{Ctx, Qp};
use crate::verbs::QpType;

impl Qp {
    /// After a request packet: up to `limit` more of its message's middle packets, written
    /// back to back into `slots` (room for `limit` packets of `MAX_PACKET` bytes), a secure
    /// QP's with room for its trailer after each (`run_gap`). Returns
    /// how many, and their length (a message's middle packets are one length).
    pub(crate) fn next_request_run(
        &mut self,
        ctx: &mut Ctx<'_>,
        slots: &mut [u8],
        limit: usize,
    ) -> (usize, usize) {
        // A reply waiting (an ACK the request just released, a CNP) goes next.
        if self.ecn.due() || self.resp.has_replies() {
            return (0, 0);
        }
        // The whole run at once where nothing but the count changes between its packets.
        let bulk = Sender::new(
            &mut self.req,
            &self.rview,
            &mut self.sq,
            self.comp.in_flight(ctx.now),
        )
        .next_middles(slots, limit);
        let (built, len) = match bulk {
            Some((built, len, run)) => {
                self.ack.release();
                let cur = self.req.cursor();
                self.completing(cur).sent_run(&run, ctx.now);
                if self.qp_type != QpType::Rc {
                    self.comp.unreliable_sent(self.req.next_psn());
                }
                (built, len)
            }
            None => self.request_run_by_packet(ctx, slots, limit),
        };
        if built > 0 {
            if self.qp_type == QpType::Rc {
                let cur = self.req.cursor();
                self.completing(cur).arm_probe(ctx.now);
            }
            self.settle_queue(ctx);
        }
        (built, len)
    }

    /// `next_request_run` packet by packet, where the run cannot be built at once (a QP
    /// that paces moves the next packet's time with each one).
    fn request_run_by_packet(
        &mut self,
        ctx: &mut Ctx<'_>,
        slots: &mut [u8],
        limit: usize,
    ) -> (usize, usize) {
        let (mut built, mut len) = (0, 0);
        let gap = run_gap(self.secure.is_some());
        // A reply waiting (an ACK the request just released, a CNP) goes next.
        while built < limit && !self.ecn.due() && !self.resp.has_replies() {
            let at = built * (len + gap);
            let next = Sender::new(
                &mut self.req,
                &self.rview,
                &mut self.sq,
                self.comp.in_flight(ctx.now),
            )
            .next_middle(ctx.now, &mut slots[at..at + MAX_PACKET]);
            let Some((n, sent)) = next else {
                break;
            };
            debug_assert!(built == 0 || n == len, "a message's middle packets differ");
            len = n;
            built += 1;
            self.ack.release();
            let cur = self.req.cursor();
            self.completing(cur).sent_in_run(&sent, ctx.now);
            if self.qp_type != QpType::Rc {
                self.comp.unreliable_sent(self.req.next_psn());
            }
        }
        (built, len)
    }
}
