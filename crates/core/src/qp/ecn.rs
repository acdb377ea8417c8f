//! RoCEv2 congestion notification, the notification point's half: a request that arrives
//! with its IP header's ECN field marked CE (a queue on the path is filling) makes the QP
//! send its peer a CNP (opcode 0x81, BECN set, 16 reserved bytes), at most one per
//! `CNP_GAP`, as DCQCN NICs pace theirs. Only to a peer that speaks selective repeat (an
//! oxrdma peer, which acts on it): rxe knows no CNP, and keeps go-back-N exactly as before.
//! The reaction point's half is the requester's window (`Window::cnp`).

use crate::build::{bth, finish_packet};
use crate::Nanos;
use oxrdma_wire::{ExtHeaders, Opcode, PacketRepr, Psn};

/// Least time between two CNPs of one QP (DCQCN's default, 50 us).
pub(crate) const CNP_GAP: Nanos = 50_000;

/// Whether a CNP is due, and when the last one left.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    last: Option<Nanos>,
    due: bool,
    /// CNPs sent, ever.
    pub sent: u64,
}

impl Notifier {
    /// A request arrived marked CE.
    pub(crate) fn marked(&mut self, now: Nanos) {
        if self.last.is_none_or(|t| now.saturating_sub(t) >= CNP_GAP) {
            self.due = true;
            self.last = Some(now);
        }
    }

    /// Whether a CNP is due now (it is then sent: `emit`).
    pub(crate) fn due(&self) -> bool {
        self.due
    }

    /// Writes the CNP for the peer's QP `dest_qpn` into `buf`; returns its length.
    pub(crate) fn emit(&mut self, dest_qpn: u32, buf: &mut [u8]) -> usize {
        self.due = false;
        self.sent += 1;
        let repr = PacketRepr {
            bth: oxrdma_wire::BthRepr {
                becn: true,
                ..bth(dest_qpn, Opcode::CNP, Psn::new(0), false, false)
            },
            ext: ExtHeaders::default(),
            payload: &[],
        };
        let hlen = repr
            .emit_headers_for(0, buf)
            .expect("a CNP fits any packet buffer");
        finish_packet(buf, hlen, 0, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cnp_per_gap_with_becn_and_reserved_bytes() {
        let mut n = Notifier::default();
        n.marked(1_000);
        assert!(n.due());
        let mut buf = [0xaa; 256];
        let len = n.emit(0xd2, &mut buf);
        // BTH 12 + reserved 16 + ICRC 4, as the CNPs of DCQCN NICs.
        assert_eq!(len, 32);
        assert_eq!(
            &buf[..12],
            &[0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0xd2, 0, 0, 0, 0]
        );
        assert!(buf[12..28].iter().all(|&b| b == 0));
        let p = PacketRepr::parse(&buf[..len]).unwrap();
        assert_eq!(p.bth.opcode, Opcode::CNP);
        assert!(p.bth.becn);
        n.marked(1_000 + CNP_GAP - 1);
        assert!(!n.due(), "within the gap");
        n.marked(1_000 + CNP_GAP);
        assert!(n.due());
        assert_eq!(n.sent, 1);
    }
}
