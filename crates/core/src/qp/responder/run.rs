//! The run path: the packets after the first of a run of one RDMA WRITE stream (the
//! segments of one GRO message), executed with the QP found, its state read and the rkey
//! resolved once for the run, and the ACK policy asked once. Only the plain case is
//! taken: the next PSN expected, a WRITE without immediate that is accepted, nothing kept
//! ahead of a gap. Anything else leaves the packet, untouched, to the per-packet path
//! (`handle_request`), which stays the reference: its effects are those of this path,
//! packet for packet.

use super::{QpView, Responder};
use crate::keys::{MrTable, RemoteRange};
use crate::qp::Qp;
use crate::verbs::{Access, QpState};
use crate::Nanos;
use oxrdma_wire::{PacketRepr, Run};

impl Qp {
    /// Executes the packets at the front of `packets` that continue `run` on this QP, as
    /// `handle_request` would; returns how many it took and their bytes. It stops, leaving the packet in
    /// `packets`, at the first that is not of the run or not the plain case.
    pub(crate) fn write_run<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        now: Nanos,
        app_serves_timers: bool,
        mrs: &MrTable,
        run: &Run,
        packets: &mut std::iter::Peekable<I>,
    ) -> (u64, usize) {
        let view = self.view();
        let mut range = None;
        let (mut taken, mut bytes) = (0, 0);
        while let Some(pkt) = packets.peek().and_then(|p| run.next(p)) {
            if !self
                .resp
                .write_next(mrs, &view, &pkt, &mut range, self.selective_repeat)
            {
                break;
            }
            bytes += packets.next().map_or(0, <[u8]>::len);
            taken += 1;
        }
        if taken > 0 {
            // Once, not after each packet: its answer depends on `now` (the same for the
            // run) and on whether the one reply waiting is an ACK, which, once true, stays
            // true through the run (a newer ACK replaces an older one).
            self.hold_ack(now, app_serves_timers);
        }
        (taken, bytes)
    }
}

impl Responder {
    /// Executes `pkt`, an RDMA WRITE ONLY or MIDDLE of this QP, if it is the plain case;
    /// false (and nothing changed) if not. `range` is the last rkey resolved in the run.
    fn write_next<'m>(
        &mut self,
        mrs: &'m MrTable,
        q: &QpView,
        pkt: &PacketRepr<'_>,
        range: &mut Option<RemoteRange<'m>>,
        selective_repeat: bool,
    ) -> bool {
        let psn = pkt.bth.psn;
        if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            || psn != self.epsn
            || !self.reorder.is_empty()
        {
            return false;
        }
        let n = pkt.payload.len();
        let placed = match (pkt.ext.reth, self.write.as_mut()) {
            // A message in one packet (every packet of a WRITE train).
            (Some(reth), None) => {
                let total = reth.dma_length;
                if n != total as usize || n > q.mtu.bytes() {
                    return false;
                }
                if total > 0 {
                    if range.is_none_or(|r| r.rkey != reth.rkey) {
                        let need = Access::REMOTE_WRITE;
                        *range = Self::remote_range(mrs, q, reth.rkey, need);
                    }
                    let Some((buffer, offset)) = range
                        .as_ref()
                        .and_then(|r| r.at(reth.virtual_address, total.into()))
                    else {
                        return false;
                    };
                    buffer.write(offset, pkt.payload);
                }
                self.message_written();
                true
            }
            (None, Some(wp)) if n == q.mtu.bytes() => {
                // A MIDDLE never ends its message.
                let placed = wp.place(pkt.payload, false);
                if placed {
                    self.epsn = self.epsn.next();
                }
                placed
            }
            _ => false,
        };
        if placed {
            self.sr_peer |= selective_repeat && pkt.bth.selective_repeat;
            self.accepted(psn, pkt.bth.ack_req);
        }
        placed
    }
}
