//! UDP segmentation offload: many RoCE packets to one peer in one `sendmsg`, cut apart by
//! the kernel (`UDP_SEGMENT`), and many in one receive, glued by it (`UDP_GRO`), so that a
//! 64 KiB WRITE crosses the kernel boundary once, not sixteen times.
//!
//! A run of packets can be one GSO message when they go to the same address and have the
//! same length, but for a shorter last one. Each segment leaves with its own IP header:
//! on IPv4, Linux numbers the segments' Identification 0, 1, 2, … (measured on this
//! host's 6.18 kernel, segmenting on a veth pair with the offload off: a DF socket that is
//! not connected sends ID 0 alone and 0..n for n segments, per message). The ICRC covers
//! the ID, so each segment's is computed with its index in the message. IPv6 has no ID.

use std::ops::Range;

/// The most segments Linux takes in one message (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;

/// The most payload one UDP datagram (IPv4) may carry, and so one GSO message.
pub const MAX_BYTES: usize = 65_507;

/// The IPv4 Identification segment `k` of a message leaves with.
pub fn ipv4_id(k: usize) -> u16 {
    k as u16
}

/// Splits packets `from..lens.len()` into runs that may each go as one message: the
/// same destination (`dests`: where a packet goes, and from which source port), the same
/// length but for a shorter last one, at most [`MAX_SEGMENTS`] and [`MAX_BYTES`]. Without
/// `gso` every packet is its own run.
pub fn runs<D: PartialEq>(
    lens: &[usize],
    dests: &[D],
    from: usize,
    gso: bool,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    runs_into(&mut out, lens, dests, from, gso);
    out
}

/// [`runs`], into `out` (cleared first; its room is reused from batch to batch).
pub fn runs_into<D: PartialEq>(
    out: &mut Vec<Range<usize>>,
    lens: &[usize],
    dests: &[D],
    from: usize,
    gso: bool,
) {
    out.clear();
    let mut i = from;
    while i < lens.len() {
        let (seg, dest) = (lens[i], &dests[i]);
        let mut end = i + 1;
        let mut bytes = seg;
        while gso
            && end < lens.len()
            && end - i < MAX_SEGMENTS
            && dests[end] == *dest
            && (lens[end] == seg || (lens[end] < seg && !starts_run(lens, dests, end)))
            && bytes + lens[end] <= MAX_BYTES
        {
            bytes += lens[end];
            end += 1;
            if lens[end - 1] < seg {
                break; // a shorter segment ends the message
            }
        }
        out.push(i..end);
        i = end;
    }
}

/// Whether packet `i` is the first of several of its length to one peer: then it is
/// better the head of its own run than the shorter tail of the one before.
fn starts_run<D: PartialEq>(lens: &[usize], dests: &[D], i: usize) -> bool {
    i + 1 < lens.len() && lens[i + 1] == lens[i] && dests[i + 1] == dests[i]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn addr(n: u8) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, n], 4791)))
    }

    #[test]
    fn a_write_s_middle_and_last_packets_go_together() {
        // FIRST (with RETH), 14 MIDDLE, LAST of a 64 KiB WRITE at MTU 4096, then an ACK.
        let mut lens = vec![4128];
        lens.extend([4112; 15]);
        lens.push(32);
        let dests = vec![addr(2); lens.len()];
        let r = runs(&lens, &dests, 0, true);
        // FIRST stays alone (the MIDDLEs are a run of their own); the 15 segments of 4112
        // bytes and the 32-byte ACK fit 65,507.
        assert_eq!(r, [0..1, 1..17]);
        assert_eq!(runs(&lens, &dests, 0, false).len(), lens.len());
        let tail = runs(&lens, &dests, 16, true);
        assert_eq!((tail.len(), tail[0].clone()), (1, 16..17));
        // A 16th MIDDLE would pass 65,507 bytes: it starts the next run.
        let mut lens = vec![4112; 17];
        lens.push(32);
        let r = runs(&lens, &vec![addr(2); 18], 0, true);
        assert_eq!(r, [0..15, 15..18]);
    }

    #[test]
    fn runs_end_at_a_new_peer_a_longer_packet_or_the_segment_limit() {
        let dests = [addr(2), addr(2), addr(3), addr(3), addr(3)];
        let r = runs(&[100, 100, 100, 200, 50], &dests, 0, true);
        assert_eq!(r, [0..2, 2..3, 3..5]);
        let lens = vec![64; 130];
        let r = runs(&lens, &vec![addr(2); 130], 0, true);
        assert_eq!(r, [0..64, 64..128, 128..130]);
        // A shorter packet ends its run even when more follow.
        let r = runs(&[100, 60, 100, 100], &[addr(2); 4], 0, true);
        assert_eq!(r, [0..2, 2..4]);
    }
}
