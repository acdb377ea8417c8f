//! The packets that continue a stream, parsed by comparing bytes.
//!
//! A receiver gets a stream's packets in runs (the segments of one GRO message). Those of
//! one RDMA WRITE stream, or of one READ's responses, share their first 8 bytes: opcode,
//! flags (no pad, transport version 0), P_Key, FECN/BECN and destination QP. Once the
//! run's first packet has been parsed in full, each next one that starts with the same 8
//! bytes is parsed by reading the fields that differ (AckReq, PSN, a WRITE's RETH), with
//! the checks [`PacketRepr::parse`] would make of such a packet, and gives what it would
//! give.

use crate::bth::{Bth, BthRepr};
use crate::icrc::ICRC_LEN;
use crate::opcode::{Opcode, MAX_PAYLOAD};
use crate::packet::{ExtHeaders, PacketRepr};
use crate::reth::{Reth, RethRepr};

const BTH_LEN: usize = Bth::<&[u8]>::LEN;
const RETH_LEN: usize = Reth::<&[u8]>::LEN;

/// What the packets after the first of a run start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    head: [u8; 8],
}

impl Run {
    /// The run `first` may open: after an RC RDMA WRITE ONLY come more of them (a WRITE
    /// train: each packet is a message); after a WRITE FIRST or MIDDLE, MIDDLEs; after a
    /// READ RESPONSE FIRST or MIDDLE, MIDDLEs. Only packets with no pad and transport
    /// version 0 open one.
    pub fn after(first: &[u8]) -> Option<Run> {
        let mut head: [u8; 8] = first.get(..8)?.try_into().ok()?;
        if head[1] & 0x3f != 0 {
            return None;
        }
        head[0] = match Opcode(head[0]) {
            Opcode::RC_RDMA_WRITE_ONLY => Opcode::RC_RDMA_WRITE_ONLY,
            Opcode::RC_RDMA_WRITE_FIRST | Opcode::RC_RDMA_WRITE_MIDDLE => {
                Opcode::RC_RDMA_WRITE_MIDDLE
            }
            Opcode::RC_RDMA_READ_RESPONSE_FIRST | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE => {
                Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
            }
            _ => return None,
        }
        .0;
        Some(Run { head })
    }

    /// The destination QP of the run's packets.
    pub fn dest_qpn(&self) -> u32 {
        u32::from_be_bytes([0, self.head[5], self.head[6], self.head[7]])
    }

    /// Whether the run's packets are requests (WRITEs), not READ responses.
    pub fn requests(&self) -> bool {
        self.head[0] != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.0
    }

    /// `packet` parsed, if it continues the run; what [`PacketRepr::parse`] gives it.
    /// Inline: built in its caller's place, a `PacketRepr` is not copied per packet.
    #[inline]
    pub fn next<'a>(&self, packet: &'a [u8]) -> Option<PacketRepr<'a>> {
        let reth = self.head[0] == Opcode::RC_RDMA_WRITE_ONLY.0;
        let headers = BTH_LEN + if reth { RETH_LEN } else { 0 };
        if packet.get(..8)? != self.head
            || packet.len() < headers + ICRC_LEN
            || !packet.len().is_multiple_of(4)
            || packet.len() - headers - ICRC_LEN > MAX_PAYLOAD
        {
            return None;
        }
        let bth = BthRepr::parse(&Bth::new_unchecked(packet)).ok()?;
        let ext = ExtHeaders {
            reth: reth.then(|| RethRepr::parse(&Reth::new_unchecked(&packet[BTH_LEN..]))),
            ..ExtHeaders::default()
        };
        Some(PacketRepr {
            bth,
            ext,
            payload: &packet[headers..packet.len() - ICRC_LEN],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::{AethRepr, Syndrome};
    use crate::opcode::Headers;
    use crate::psn::Psn;
    use proptest::prelude::*;

    /// A packet with `opcode` and `payload` bytes of payload, as an engine emits it.
    fn packet(opcode: Opcode, psn: u32, payload: usize) -> Vec<u8> {
        let headers = opcode.info().unwrap().headers;
        let repr = PacketRepr {
            bth: BthRepr {
                opcode,
                solicited: false,
                migreq: true,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qpn: 0x11,
                ack_req: psn.is_multiple_of(7),
                psn: Psn::new(psn),
                selective_repeat: true,
            },
            ext: ExtHeaders {
                reth: headers.contains(Headers::RETH).then_some(RethRepr {
                    virtual_address: 0x1000 + u64::from(psn) * 1024,
                    rkey: 0x42,
                    dma_length: payload as u32,
                }),
                immdt: headers.contains(Headers::IMMDT).then_some(7),
                aeth: headers.contains(Headers::AETH).then_some(AethRepr {
                    syndrome: Syndrome::Ack { credits: 31 },
                    msn: 3,
                }),
                ..ExtHeaders::default()
            },
            payload: &vec![0x5a; payload],
        };
        let mut buf = vec![0; 4200];
        let n = repr.emit(&mut buf).expect("emit");
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_write_train_continues_and_other_packets_do_not() {
        let run = Run::after(&packet(Opcode::RC_RDMA_WRITE_ONLY, 1, 1024)).unwrap();
        for (psn, len) in [(2, 1024), (3, 0), (4, 4096), (5, 12)] {
            let p = packet(Opcode::RC_RDMA_WRITE_ONLY, psn, len);
            assert_eq!(run.next(&p), Some(PacketRepr::parse(&p).unwrap()));
        }
        for p in [
            packet(Opcode::RC_RDMA_WRITE_MIDDLE, 2, 1024),
            packet(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 2, 1024),
            packet(Opcode::RC_SEND_ONLY, 2, 1024),
            packet(Opcode::RC_RDMA_WRITE_ONLY, 2, 1023),
            packet(Opcode::RC_RDMA_WRITE_ONLY, 2, 1024)[..30].to_vec(),
        ] {
            assert_eq!(run.next(&p), None);
        }
        for (first, middle, last) in [
            (
                Opcode::RC_RDMA_WRITE_FIRST,
                Opcode::RC_RDMA_WRITE_MIDDLE,
                Opcode::RC_RDMA_WRITE_LAST,
            ),
            (
                Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                Opcode::RC_RDMA_READ_RESPONSE_LAST,
            ),
        ] {
            let run = Run::after(&packet(first, 1, 1024)).unwrap();
            assert_eq!(run.requests(), first == Opcode::RC_RDMA_WRITE_FIRST);
            let p = packet(middle, 2, 1024);
            assert_eq!(run.next(&p), Some(PacketRepr::parse(&p).unwrap()));
            assert_eq!(run.next(&packet(last, 3, 1024)), None);
        }
        assert!(Run::after(&packet(Opcode::RC_SEND_ONLY, 1, 8)).is_none());
        assert!(Run::after(&packet(Opcode::RC_RDMA_WRITE_ONLY, 1, 7)).is_none());
    }

    proptest! {
        /// Whatever a run takes, the full parser takes too and reads the same: a packet of
        /// the run with any bytes changed and any length.
        #[test]
        fn a_run_reads_what_the_parser_reads(
            kind in 0usize..3,
            len in 0usize..1100,
            flips in proptest::collection::vec((0usize..1100, any::<u8>()), 0..6),
            cut in 0usize..1200,
        ) {
            let (first, op) = [
                (Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_RDMA_WRITE_ONLY),
                (Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_MIDDLE),
                (Opcode::RC_RDMA_READ_RESPONSE_FIRST, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE),
            ][kind];
            let middle = op != Opcode::RC_RDMA_WRITE_ONLY;
            let run = Run::after(&packet(first, 1, 1024)).unwrap();
            let mut p = packet(op, 2, if middle { len & !3 } else { len });
            for (at, x) in flips {
                if let Some(b) = p.get_mut(at % 40) {
                    *b ^= x;
                }
            }
            p.truncate(cut.max(1));
            if let Some(r) = run.next(&p) {
                prop_assert_eq!(Ok(r), PacketRepr::parse(&p));
            }
        }
    }
}
