//! QP1, the general services interface: CM MADs in and out as UD SEND_ONLY packets with
//! the GSI Q_Key, between the network and the engine's connection manager.

use super::{Engine, Transmit};
use crate::build::{bth, finish_packet};
use crate::drops::RxDrop;
use crate::gid::Gid;
use crate::Nanos;
use oxrdma_wire::deth::DethRepr;
use oxrdma_wire::mad::{GSI_QKEY, MAD_LEN};
use oxrdma_wire::packet::ExtHeaders;
use oxrdma_wire::{Opcode, PacketRepr, Psn};

pub(super) const GSI_QPN: u32 = 1;
/// The UDP source port of QP1's packets: the one Linux rxe uses (the captures).
const GSI_SPORT: u16 = 55410;

impl Engine {
    /// A packet to QP1: a MAD for the CM if it is a UD SEND_ONLY with the GSI Q_Key.
    pub(super) fn handle_gsi(&mut self, now: Nanos, src: Gid, pkt: &PacketRepr) {
        let gsi = pkt.bth.opcode == Opcode::UD_SEND_ONLY
            && pkt.ext.deth.is_some_and(|d| d.qkey == GSI_QKEY)
            && pkt.payload.len() >= MAD_LEN;
        if !gsi {
            return self.stats.rx_drops.count(RxDrop::Malformed);
        }
        if self.cm.handle_mad(now, src, pkt.payload).is_err() {
            self.stats.rx_drops.count(RxDrop::Mad);
        }
    }

    /// Writes the CM's next MAD into `buf` as a QP1 packet.
    pub(super) fn next_mad(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let (dest, mad) = self.cm.poll_mad()?;
        let psn = Psn::new(self.gsi_psn);
        self.gsi_psn = (self.gsi_psn + 1) & 0xff_ffff;
        let pkt = PacketRepr {
            bth: bth(GSI_QPN, Opcode::UD_SEND_ONLY, psn, true, false),
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: GSI_QKEY,
                    src_qpn: GSI_QPN,
                }),
                ..ExtHeaders::default()
            },
            payload: &mad,
        };
        // Cannot fail: a MAD is far below the buffer's MAX_PACKET bytes.
        let hlen = pkt.emit_headers(buf).ok()?;
        buf[hlen..hlen + MAD_LEN].copy_from_slice(&mad);
        let len = finish_packet(buf, hlen, MAD_LEN, None);
        self.stats.tx_packets += 1;
        Some(Transmit {
            dest,
            sgid: None,
            src_port: GSI_SPORT,
            len,
        })
    }
}
