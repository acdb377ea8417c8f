//! The UC responder: requests in PSN order as for RC, but nothing is acknowledged and
//! nothing is retransmitted. A lost packet costs its whole message: the responder drops the
//! rest of it silently and picks up at the next message's first packet (IBA 9.7.5.1.3).

use super::{Outcome, QpView, Responder};
use crate::ctx::Ctx;
use crate::drops::RxDrop;
use crate::verbs::QpState;
use crate::wr::RecvWr;
use oxrdma_wire::{Operation, PacketRepr};

impl Responder {
    /// A UC request packet; Err says why it was dropped.
    pub(crate) fn handle_uc_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RxDrop> {
        if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return Err(RxDrop::QpState);
        }
        let info = pkt.bth.opcode.info().map_err(|_| RxDrop::Malformed)?;
        let psn = pkt.bth.psn;
        if psn.diff(self.epsn) < 0 {
            // From the past: a duplicate the network made (the requester never resends).
            // rxe would take a duplicated first packet as a new message; we do not deliver
            // a message twice.
            return Err(RxDrop::UcIncomplete);
        }
        if psn != self.epsn || self.uc_dropping {
            // Whatever was in progress is incomplete and will stay so.
            self.abandon_uc_message(ctx, q);
            if !info.position.starts_message() {
                self.uc_dropping = true;
                return Err(RxDrop::UcIncomplete);
            }
            self.uc_dropping = false;
            self.epsn = psn;
        }
        let result = match info.operation {
            Operation::Send | Operation::SendWithImm => self.recv_send(ctx, q, pkt, &info),
            Operation::Write | Operation::WriteWithImm => self.recv_write(ctx, q, pkt, &info),
            _ => return Err(RxDrop::WrongTransport),
        };
        match result {
            Ok(Outcome::Accepted) => Ok(()),
            // No receive posted, or a request this QP may not execute: the message is
            // dropped (a receive WQE that failed locally was completed with its error).
            Ok(Outcome::Rnr) | Err(_) => {
                self.abandon_uc_message(ctx, q);
                self.uc_dropping = !info.position.ends_message();
                self.epsn = psn.next();
                Err(match result {
                    Ok(_) => RxDrop::NoReceive,
                    Err(_) => RxDrop::Invalid,
                })
            }
        }
    }

    /// Forgets a partly received message; its receive WQE (if it had one) goes back to the
    /// head of the queue for the next message.
    fn abandon_uc_message(&mut self, ctx: &mut Ctx<'_>, q: &QpView) {
        if let Some(r) = self.recv.take() {
            let wr = RecvWr {
                wr_id: r.wr_id,
                sges: r.sges,
            };
            self.return_recv(ctx, q, wr);
        }
        self.write = None;
    }
}
