//! UD receive: one-packet messages from anyone who knows the QP's Q_Key, delivered behind
//! the 40-byte GRH area every UD receive buffer starts with.

use crate::drops::RxDrop;
use crate::gid::Gid;
use crate::mr::scatter;
use crate::qp::{Ctx, Qp};
use crate::verbs::{Access, QpState, WcOpcode, WcStatus};
use crate::wr::WorkCompletion;
use oxrdma_wire::{checksum, icrc, Opcode, PacketRepr};
use std::net::IpAddr;

/// Bytes of the GRH area in front of every UD receive.
pub const GRH_LEN: usize = 40;

/// The GRH area of a datagram from `src` to `dst` whose UDP payload (BTH to ICRC) is
/// `udp_payload` bytes, as RoCEv2 devices fill it: the IPv6 header, or for IPv4 twenty zero
/// bytes and then the IPv4 header (TTL, ID and TOS are not seen in user space: 64, 0, 0).
pub(crate) fn grh(src: Gid, dst: Gid, udp_payload: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = icrc::ipv4_udp_header(s.octets(), d.octets(), 0, 0, 0, udp_payload);
            g[20..].copy_from_slice(&h[..20]);
            checksum::fill_ipv4(&mut g[20..]);
        }
        _ => {
            let h = icrc::ipv6_udp_header(src.0, dst.0, 0, 0, udp_payload);
            g.copy_from_slice(&h[..GRH_LEN]);
        }
    }
    g
}

impl Qp {
    /// A datagram for this UD QP; Err says why it was dropped.
    pub(crate) fn handle_datagram(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        src: Gid,
        grh: &[u8; GRH_LEN],
    ) -> Result<(), RxDrop> {
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
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
        if deth.qkey != self.qkey {
            return Err(RxDrop::QkeyMismatch);
        }
        let Some(wr) = self.take_recv(ctx) else {
            return Err(RxDrop::NoReceive);
        };
        let total = GRH_LEN + pkt.payload.len();
        let status = match ctx.mrs.local(self.pd, &wr.sges, Access::LOCAL_WRITE) {
            None => WcStatus::LocProtErr,
            Some(segs) if scatter(&segs, 0, grh) && scatter(&segs, GRH_LEN, pkt.payload) => {
                WcStatus::Success
            }
            Some(_) => WcStatus::LocLenErr,
        };
        ctx.complete(
            self.recv_cq,
            WorkCompletion {
                byte_len: if status == WcStatus::Success {
                    total as u32
                } else {
                    0
                },
                imm: pkt.ext.immdt,
                src_qp: deth.src_qpn,
                src_gid: Some(src),
                ..WorkCompletion::new(wr.wr_id, status, WcOpcode::Recv, self.qpn)
            },
        );
        if status == WcStatus::LocProtErr {
            // A receive WQE naming memory it may not use is the application's fault, and
            // fatal to the QP as for the other transports.
            self.enter_error(ctx, Some(crate::verbs::EventType::QpFatal));
        }
        Ok(())
    }
}
