//! The UD receive path of the responder: one-packet messages from anyone who knows the
//! QP's Q_Key, delivered behind the 40-byte GRH area.

use super::{Fatal, QpView, Responder};
use crate::ctx::Ctx;
use crate::drops::RxDrop;
use crate::gid::Gid;
use crate::grh::GRH_LEN;
use crate::mr::scatter;
use crate::verbs::{Access, QpState, WcOpcode, WcStatus};
use crate::wr::WorkCompletion;
use oxrdma_wire::{Opcode, PacketRepr};

impl Responder {
    /// A datagram for this UD QP; Err says why it was dropped.
    pub(crate) fn handle_datagram(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        src: Gid,
        grh: &[u8; GRH_LEN],
    ) -> Result<Fatal, RxDrop> {
        if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return Err(RxDrop::QpState);
        }
        let Some(deth) = pkt.ext.deth else {
            return Err(RxDrop::Malformed);
        };
        let op = pkt.bth.opcode;
        if !matches!(
            op,
            Opcode::UD_SEND_ONLY | Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        ) {
            return Err(RxDrop::Invalid);
        }
        if deth.qkey != q.qkey {
            return Err(RxDrop::QkeyMismatch);
        }
        let Some(wr) = self.take_recv(ctx, q) else {
            return Err(RxDrop::NoReceive);
        };
        let total = GRH_LEN + pkt.payload.len();
        let status = match ctx.mrs.local(q.pd, &wr.sges, Access::LOCAL_WRITE) {
            None => WcStatus::LocProtErr,
            Some(segs) if scatter(&segs, 0, grh) && scatter(&segs, GRH_LEN, pkt.payload) => {
                WcStatus::Success
            }
            // A datagram longer than the receive: rxe's status (not IBA's length error).
            Some(_) => WcStatus::LocQpOpErr,
        };
        self.release(q);
        ctx.complete(
            q.recv_cq,
            WorkCompletion {
                byte_len: if status == WcStatus::Success {
                    total as u32
                } else {
                    0
                },
                imm: pkt.ext.immdt,
                src_qp: deth.src_qpn,
                src_gid: Some(src),
                ..WorkCompletion::new(wr.wr_id, status, WcOpcode::Recv, q.qpn)
            },
        );
        // A receive WQE naming memory it may not use is the application's fault, and fatal
        // to the QP as for the other transports.
        Ok((status == WcStatus::LocProtErr).then_some(crate::verbs::EventType::QpFatal))
    }
}
