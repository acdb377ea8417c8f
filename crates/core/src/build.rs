//! Packet building that the requester and the responder share: the BTH every packet of a
//! QP starts with, and the pad and ICRC space that end it.

use crate::verbs::Mtu;
use oxrdma_wire::{BthRepr, Opcode, Psn};

/// The BTH of a packet a QP sends to `dest_qpn`.
pub(crate) fn bth(
    dest_qpn: u32,
    opcode: Opcode,
    psn: Psn,
    ack_req: bool,
    solicited: bool,
) -> BthRepr {
    BthRepr {
        opcode,
        solicited,
        migreq: false,
        pkey: oxrdma_wire::DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn,
        ack_req,
        psn,
        selective_repeat: false,
    }
}

/// Writes ICRC placeholder and pad after a payload of `n` bytes at `hlen`; returns the
/// packet length.
pub(crate) fn finish_packet(buf: &mut [u8], hlen: usize, n: usize) -> usize {
    let pad = usize::from(oxrdma_wire::packet::pad_for(n));
    let end = hlen + n + pad + oxrdma_wire::icrc::ICRC_LEN;
    buf[hlen + n..end].fill(0);
    end
}

/// PSNs a message of `len` bytes takes at path MTU `mtu` (at least one).
pub(crate) fn packets_for(len: u64, mtu: Mtu) -> u32 {
    len.div_ceil(mtu.bytes() as u64).max(1) as u32
}
