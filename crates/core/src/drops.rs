//! Why a received packet was not acted on. Every packet the engine takes in and ignores is
//! counted under one reason, so a silent drop shows up in the counters instead of as a peer
//! that seems to send nothing.

use std::fmt;

/// The reasons, one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxDrop {
    /// The transport headers do not parse.
    Malformed,
    /// No QP with the destination QPN.
    UnknownQp,
    /// The source address is not the connected QP's peer.
    WrongPeer,
    /// An opcode of another transport than the QP's (e.g. RC on a UD QP).
    WrongTransport,
    /// The QP is in a state that takes no packets of this kind (RESET, INIT, ERR, or a
    /// response before RTS).
    QpState,
    /// An ACK or response outside the outstanding PSN window: a duplicate, or a PSN never
    /// sent.
    StaleResponse,
    /// A response whose PSN is outstanding but which fits no outstanding request (wrong
    /// length, opcode or position).
    UnexpectedResponse,
    /// A request beyond the expected PSN (the first one of a gap is NAKed).
    OutOfSequence,
    /// A UD datagram with a Q_Key other than the QP's.
    QkeyMismatch,
    /// A UD datagram or UC message with no receive posted.
    NoReceive,
    /// A UC packet of a message that lost an earlier packet, or a UC duplicate.
    UcIncomplete,
    /// A UC or UD request the QP may not execute (bad opcode, access, length).
    Invalid,
    /// A MAD to QP1 the connection manager ignored (malformed, unknown comm ID, wrong
    /// state, backlog full).
    Mad,
    /// A packet for a secure QP whose tag did not verify.
    AuthFailed,
    /// A packet for a secure QP whose sequence number was seen already.
    Replayed,
}

impl RxDrop {
    /// Every reason, in counter order.
    pub const ALL: [RxDrop; 15] = [
        RxDrop::Malformed,
        RxDrop::UnknownQp,
        RxDrop::WrongPeer,
        RxDrop::WrongTransport,
        RxDrop::QpState,
        RxDrop::StaleResponse,
        RxDrop::UnexpectedResponse,
        RxDrop::OutOfSequence,
        RxDrop::QkeyMismatch,
        RxDrop::NoReceive,
        RxDrop::UcIncomplete,
        RxDrop::Invalid,
        RxDrop::Mad,
        RxDrop::AuthFailed,
        RxDrop::Replayed,
    ];

    /// The reason in a few words, for logs and counter dumps.
    pub fn describe(self) -> &'static str {
        match self {
            RxDrop::Malformed => "malformed",
            RxDrop::UnknownQp => "unknown destination QP",
            RxDrop::WrongPeer => "source is not the connected peer",
            RxDrop::WrongTransport => "opcode of another transport",
            RxDrop::QpState => "QP state takes no such packet",
            RxDrop::StaleResponse => "stale or duplicate response",
            RxDrop::UnexpectedResponse => "response fits no outstanding request",
            RxDrop::OutOfSequence => "request PSN out of sequence",
            RxDrop::QkeyMismatch => "Q_Key mismatch",
            RxDrop::NoReceive => "no receive posted",
            RxDrop::UcIncomplete => "UC message incomplete or duplicate",
            RxDrop::Invalid => "invalid request",
            RxDrop::Mad => "MAD the CM ignored",
            RxDrop::AuthFailed => "secure QP: tag did not verify",
            RxDrop::Replayed => "secure QP: replayed",
        }
    }
}

/// Counters, one per [`RxDrop`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxDrops([u64; RxDrop::ALL.len()]);

impl RxDrops {
    /// Counts one packet dropped for `why`.
    pub fn count(&mut self, why: RxDrop) {
        self.0[why as usize] += 1;
    }
    /// Packets dropped for `why`.
    pub fn get(&self, why: RxDrop) -> u64 {
        self.0[why as usize]
    }
    /// Packets dropped for any reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// The reasons that counted something, with their counts.
    pub fn nonzero(&self) -> impl Iterator<Item = (RxDrop, u64)> + '_ {
        RxDrop::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

impl fmt::Display for RxDrops {
    /// "3 malformed, 1 Q_Key mismatch", or "none".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (r, n) in self.nonzero() {
            write!(f, "{}{n} {}", if first { "" } else { ", " }, r.describe())?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_prints_only_nonzero() {
        let mut d = RxDrops::default();
        assert_eq!(d.to_string(), "none");
        d.count(RxDrop::WrongPeer);
        d.count(RxDrop::WrongPeer);
        d.count(RxDrop::Invalid);
        assert_eq!(d.get(RxDrop::WrongPeer), 2);
        assert_eq!(d.total(), 3);
        assert_eq!(
            d.to_string(),
            "2 source is not the connected peer, 1 invalid request"
        );
    }

    #[test]
    fn all_lists_every_reason_in_order() {
        for (i, r) in RxDrop::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
