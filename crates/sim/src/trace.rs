//! What `OXRDMA_SIM_TRACE` prints: a line per packet, delivered or lost.

use oxrdma_core::Nanos;

/// A packet's line in the trace: delivered at `now`, or (`what` "lost") lost as it left.
pub(crate) fn packet(now: Nanos, from: usize, to: usize, data: &[u8], what: &str) {
    match oxrdma_wire::PacketRepr::parse(data) {
        Ok(p) => eprintln!(
            "{now:>12} {}->{}{what} {:<34} qp={:#08x} psn={:>8} {}{} len={} aeth={:?}{}",
            from,
            to,
            p.bth.opcode.name(),
            p.bth.dest_qpn,
            p.bth.psn.value(),
            if p.bth.ack_req { "A" } else { "-" },
            if p.ext.reth.is_some() { "R" } else { "-" },
            p.payload.len(),
            p.ext.aeth.map(|a| (a.syndrome, a.msn)),
            if p.bth.selective_repeat && p.bth.opcode == oxrdma_wire::Opcode::RC_ACKNOWLEDGE {
                let b: Vec<_> = oxrdma_wire::sack::runs(p.bth.psn, p.payload)
                    .map(|(s, e)| format!("{s}..{e}"))
                    .collect();
                format!(" sack=[{}]", b.join(" "))
            } else {
                String::new()
            }
        ),
        Err(e) => eprintln!("{now:>12} {from}->{to}{what} malformed: {e}"),
    }
}
