//! Packet building that the requester and the responder share: the BTH every packet of a
//! QP starts with, and the pad and ICRC space that end it.

use crate::verbs::Mtu;
use oxrdma_wire::icrc::ICRC_LEN;
use oxrdma_wire::{icrc_part, BthRepr, Opcode, Psn};

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

/// Where a packet with headers `headers` and `n` bytes of payload carries its transport
/// part of the ICRC (`icrc_part`), the hash of its headers, to be continued over the
/// payload as it is copied (`mr::gather`) and handed to [`finish_packet`].
pub(crate) fn part_for(headers: &[u8], n: usize) -> Option<u32> {
    let pad = usize::from(oxrdma_wire::packet::pad_for(n));
    icrc_part::carries_part(headers.len() + n + pad).then(|| icrc_part::part_start(headers))
}

/// Writes the pad after a payload of `n` bytes at `hlen`, and the ICRC field: zero, or in
/// a packet long enough, the transport bytes' part of the ICRC: from `hashed`, the hash
/// of the headers and payload taken as the payload was copied ([`part_for`]), or hashed
/// here while the payload is in the cache. The driver finishes it once it knows the IP
/// and UDP headers. Returns the packet length.
pub(crate) fn finish_packet(buf: &mut [u8], hlen: usize, n: usize, hashed: Option<u32>) -> usize {
    let end = finish_sealed(buf, hlen, n);
    match hashed {
        Some(h) if icrc_part::carries_part(end - ICRC_LEN) => {
            let pad = &buf[hlen + n..end - ICRC_LEN];
            let part = icrc_part::part_end(icrc_part::hash_more(h, pad));
            buf[end - ICRC_LEN..end].copy_from_slice(&part.to_le_bytes());
        }
        _ => put_icrc_field(buf, end),
    }
    end
}

/// The pad and a zero ICRC field of a secure QP's packet: sealing takes the ICRC part
/// (`Secured::seal`), so none is hashed while the payload is copied. Returns the length.
pub(crate) fn finish_sealed(buf: &mut [u8], hlen: usize, n: usize) -> usize {
    let pad = usize::from(oxrdma_wire::packet::pad_for(n));
    let end = hlen + n + pad + ICRC_LEN;
    buf[hlen + n..end].fill(0);
    end
}

/// Writes the ICRC field of the packet that ends at `end`: the transport bytes' part of
/// the ICRC in a packet long enough (`icrc_part`), for the driver to finish; else zero.
pub(crate) fn put_icrc_field(buf: &mut [u8], end: usize) {
    let body = end - ICRC_LEN;
    let part = if icrc_part::carries_part(body) {
        icrc_part::transport_part(&buf[..body])
    } else {
        0
    };
    buf[body..end].copy_from_slice(&part.to_le_bytes());
}

/// PSNs a message of `len` bytes takes at path MTU `mtu` (at least one).
pub(crate) fn packets_for(len: u64, mtu: Mtu) -> u32 {
    len.div_ceil(mtu.bytes() as u64).max(1) as u32
}
