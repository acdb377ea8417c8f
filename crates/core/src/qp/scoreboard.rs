//! What the requester knows of each PSN in flight when the peer speaks selective repeat:
//! which the responder holds (its SACK said so), and which are lost. A packet is
//! lost once a packet sent three or more transmissions after it (by transmission, not
//! PSN: a packet sent again is younger than everything before it) has been delivered; so
//! a resent packet lost again is found the same way, and reordering by less than three
//! packets is no loss.

use oxrdma_wire::Psn;
use std::collections::VecDeque;

/// How many transmissions after a packet one must be that, delivered, shows it lost.
const REORDER_PACKETS: u64 = 3;
/// `sent`: the responder holds the packet (SACKed).
const SACKED: u64 = 1 << 63;
/// `sent`: the PSN carries no request packet (a READ's response PSNs).
const NO_PACKET: u64 = 1 << 62;
/// Either: the PSN is not in flight.
const HELD: u64 = SACKED | NO_PACKET;
/// `sent`: found lost, not sent again yet (also not in flight).
const LOST: u64 = 1 << 61;
/// `sent`: a READ or atomic request. The responder holding it does not bring its
/// response (asking again does: it replays), so a go-back never steps over it.
const ASKS: u64 = 1 << 59;
/// `sent`: sent more than once. Which copy arrived is unknown, so its delivery dates
/// nothing: taken as the latest, it would make every packet sent between the copies look
/// lost.
const RESENT: u64 = 1 << 60;
/// The transmission number in an entry.
const TX: u64 = ASKS - 1;

/// Entry `tx` was delivered: `delivered_tx` moves past its transmission, unless it went
/// more than once (RESENT).
fn dates(delivered_tx: &mut u64, tx: u64) {
    if tx & RESENT == 0 {
        *delivered_tx = (*delivered_tx).max((tx & TX) + 1);
    }
}

/// The scoreboard of one QP's send window, from `base` (its `una`).
#[derive(Debug, Default)]
pub(crate) struct Scoreboard {
    base: Psn,
    /// Per PSN from `base`: the number of its latest transmission, or HELD.
    sent: VecDeque<u64>,
    /// PSNs in the order of their transmissions, numbers from `log_base`.
    log: VecDeque<Psn>,
    log_base: u64,
    /// The number of the next transmission.
    next_tx: u64,
    /// The newest transmission known to have been delivered (plus one; 0: none yet).
    delivered_tx: u64,
    /// PSNs found lost, in the order found (those since held, acknowledged or sent again
    /// are skipped when met).
    lost: VecDeque<Psn>,
    /// PSNs marked LOST.
    lost_count: u32,
    /// PSNs from `base` SACKed (or with no packet).
    held: u32,
    /// PSNs from `base` SACKed: `any_held` is asked per packet sent while a READ or atomic
    /// is outstanding, and a walk of the window there cost a WRITE stream 12 % of its rate.
    sacked_count: u32,
    /// Packets resent because they were found lost, ever.
    pub resent: u64,
    /// PSNs delivered (held or acknowledged), ever: the delivery rate counts them.
    pub delivered: u64,
    /// Packets found lost, ever (the window's congestion signal).
    pub found_lost: u64,
}

impl Scoreboard {
    /// A scoreboard for PSNs `una..high`, all sent once, in order.
    pub(crate) fn new(una: Psn, high: Psn) -> Self {
        let mut s = Scoreboard {
            base: una,
            ..Scoreboard::default()
        };
        let mut p = una;
        while p != high {
            s.sent_packet(p, 1, false);
            p = p.next();
        }
        s
    }

    /// Request packet `psn` (consuming `psns` PSNs: a READ request one per response; `asks`:
    /// a READ or atomic) left, for the first time or again.
    pub(crate) fn sent_packet(&mut self, psn: Psn, psns: u32, asks: bool) {
        let i = self.base.distance_to(psn) as usize;
        if i > self.sent.len() {
            return; // not contiguous with what was sent: not tracked
        }
        let tx = self.next_tx | if asks { ASKS } else { 0 };
        self.next_tx += 1;
        self.log.push_back(psn);
        if i == self.sent.len() {
            self.sent.push_back(tx);
            for _ in 1..psns {
                self.sent.push_back(NO_PACKET);
                self.held += 1;
            }
        } else if self.sent[i] & HELD == 0 {
            if self.sent[i] & LOST != 0 {
                self.lost_count -= 1;
            }
            self.sent[i] = tx | RESENT | (self.sent[i] & ASKS);
        }
    }

    /// Everything before `una` is acknowledged.
    pub(crate) fn acked(&mut self, una: Psn) {
        let n = (self.base.distance_to(una) as usize).min(self.sent.len());
        for tx in self.sent.drain(..n) {
            if tx & LOST != 0 {
                self.lost_count -= 1;
            }
            if tx & SACKED != 0 {
                self.sacked_count -= 1;
            }
            if tx & HELD != 0 {
                self.held -= 1;
            } else {
                dates(&mut self.delivered_tx, tx);
                self.delivered += 1;
            }
        }
        self.base = una;
        if self.sent.is_empty() {
            // Everything is acknowledged: no transmission logged can be found lost any
            // more (`find_lost` would step over each), nor can any PSN found lost.
            self.log_base += self.log.len() as u64;
            self.log.clear();
            self.lost.clear();
        }
    }

    /// The responder holds `start..end`.
    pub(crate) fn sacked(&mut self, start: Psn, end: Psn) {
        let from = if start.before(self.base) {
            self.base
        } else {
            start
        };
        let (i, j) = (
            self.base.distance_to(from) as usize,
            (self.base.distance_to(end) as usize).min(self.sent.len()),
        );
        if end.before(self.base) || i >= j {
            return;
        }
        for tx in self.sent.range_mut(i..j) {
            if *tx & HELD == 0 {
                if *tx & LOST != 0 {
                    self.lost_count -= 1;
                }
                dates(&mut self.delivered_tx, *tx);
                *tx = SACKED | (*tx & ASKS);
                self.held += 1;
                self.sacked_count += 1;
                self.delivered += 1;
            }
        }
    }

    /// Finds the packets that the delivered ones show lost (once an ACK's cumulative part
    /// and its blocks have both been taken: the blocks may hold what a resent packet,
    /// acknowledged, seems to show lost).
    pub(crate) fn find_lost(&mut self) {
        while self.log_base + REORDER_PACKETS < self.delivered_tx {
            let Some(psn) = self.log.pop_front() else {
                break;
            };
            let tx = self.log_base;
            self.log_base += 1;
            let i = self.base.distance_to(psn) as usize;
            let latest = |e: u64| e & (HELD | LOST) == 0 && e & TX == tx;
            if !psn.before(self.base) && self.sent.get(i).is_some_and(|&e| latest(e)) {
                self.mark_lost(i);
            }
        }
    }

    /// Entry `i` (in flight) is found lost: it waits to be sent again.
    fn mark_lost(&mut self, i: usize) {
        self.sent[i] |= LOST;
        self.lost_count += 1;
        self.found_lost += 1;
        self.lost.push_back(self.base.add(i as u32));
    }

    /// The next PSN to send again, if any is lost.
    pub(crate) fn next_lost(&mut self) -> Option<Psn> {
        while let Some(psn) = self.lost.pop_front() {
            let i = self.base.distance_to(psn) as usize;
            if psn.before(self.base) {
                continue;
            }
            if let Some(t) = self.sent.get_mut(i).filter(|t| **t & LOST != 0) {
                *t &= !LOST;
                self.lost_count -= 1;
                self.resent += 1;
                return Some(psn);
            }
        }
        None
    }

    /// Whether a lost packet waits to be sent again.
    pub(crate) fn has_lost(&self) -> bool {
        self.lost_count > 0
    }

    /// Whether the responder holds `psn` (its SACK said so), and it is no READ or atomic
    /// (whose response may still be lost).
    pub(crate) fn holds(&self, psn: Psn) -> bool {
        let i = self.base.distance_to(psn) as usize;
        self.sent
            .get(i)
            .is_some_and(|&t| t & (SACKED | ASKS) == SACKED)
    }

    /// Whether the responder holds anything beyond a gap.
    pub(crate) fn any_held(&self) -> bool {
        self.sacked_count > 0
    }

    /// Whether the responder holds every PSN in the window (a READ's or atomic's response
    /// may still be missing).
    pub(crate) fn all_held(&self) -> bool {
        self.held as usize == self.sent.len()
    }

    /// Whether `psn` carries a request packet of ours (not a READ's response PSN).
    pub(crate) fn is_packet(&self, psn: Psn) -> bool {
        let i = self.base.distance_to(psn) as usize;
        self.sent.get(i).is_some_and(|&t| t & NO_PACKET == 0)
    }

    /// The probe timer expired with packets held beyond a gap and nothing new delivered:
    /// every packet sent before the newest one delivered is lost, however few were sent
    /// after it (the tail of a stream has no three). If none is, what is missing was sent
    /// again after that. `overdue`: the probe waited longer than a round trip with
    /// nothing sent and nothing delivered, so that copy is lost too, and the oldest
    /// packet in flight alone goes again (its delivery dates the rest); before, such a
    /// stall waited for the ACK timeout. Not otherwise: where the ACK timeout caps the
    /// probe's wait below the RTT (a 40 ms path, timeout 14), the copy may be on its way,
    /// and sending it again early made a long lossy path's transfer 3x as long.
    pub(crate) fn probe_lost(&mut self, overdue: bool) {
        for i in 0..self.sent.len() {
            let t = self.sent[i];
            if t & (HELD | LOST) == 0 && (t & TX) + 1 < self.delivered_tx {
                self.mark_lost(i);
            }
        }
        // Nothing was, nor waits to go again from before.
        if overdue && self.lost_count == 0 {
            if let Some(i) = self.sent.iter().position(|&t| t & (HELD | LOST) == 0) {
                self.mark_lost(i);
            }
        }
    }

    /// Counts every packet in flight lost (the ACK timeout expired), in PSN order; and the
    /// oldest one even if it is held (the ACK that would have moved past it was lost: its
    /// copy draws another).
    pub(crate) fn mark_all_lost(&mut self) {
        if let Some(t) = self.sent.front_mut().filter(|t| **t & SACKED != 0) {
            *t = LOST | RESENT;
            self.held -= 1;
            self.sacked_count -= 1;
            self.lost_count += 1;
        }
        self.lost.clear();
        for (i, t) in self.sent.iter_mut().enumerate() {
            if *t & HELD == 0 {
                if *t & LOST == 0 {
                    *t |= LOST;
                    self.lost_count += 1;
                    self.found_lost += 1;
                }
                self.lost.push_back(self.base.add(i as u32));
            }
        }
    }

    /// Forgets what was found lost (a go-back sends everything not held anyway).
    pub(crate) fn forget_lost(&mut self) {
        for psn in self.lost.drain(..) {
            let i = self.base.distance_to(psn) as usize;
            if let Some(t) = self.sent.get_mut(i).filter(|t| **t & LOST != 0) {
                *t &= !LOST;
                self.lost_count -= 1;
            }
        }
    }

    /// Packets in flight: sent, not acknowledged, not held, not found lost.
    pub(crate) fn in_flight(&self) -> u32 {
        (self.sent.len() as u32).saturating_sub(self.held + self.lost_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The counts kept beside the window agree with the window, whatever happens to it.
        #[test]
        fn counts_match_the_window(ops in prop::collection::vec((0u8..7, 0u32..24, 0u32..6), 0..80)) {
            let base = Psn::new(0xff_fff0);
            let mut s = Scoreboard::new(base, base.add(8));
            let mut high = base.add(8);
            for (op, a, b) in ops {
                let una = s.base;
                match op {
                    0 => {
                        s.sent_packet(high, 1 + b % 3, b % 2 == 0);
                        high = high.add(1 + b % 3);
                    }
                    1 => s.sent_packet(una.add(a), 1, false),
                    2 => s.sacked(una.add(a), una.add(a + b)),
                    3 => s.acked(una.add(a.min(una.distance_to(high)) / 2)),
                    4 => s.mark_all_lost(),
                    5 => s.probe_lost(b % 2 == 0),
                    _ => {
                        s.find_lost();
                        s.next_lost();
                    }
                }
                let walk = |f: u64| s.sent.iter().filter(|&&t| t & f != 0).count() as u32;
                prop_assert_eq!(s.any_held(), walk(SACKED) > 0);
                prop_assert_eq!(s.sacked_count, walk(SACKED));
                prop_assert_eq!(s.held, walk(HELD));
                prop_assert_eq!(s.lost_count, walk(LOST));
            }
        }
    }

    #[test]
    fn finds_holes_once_three_later_packets_arrive_and_a_lost_resend_again() {
        let base = Psn::new(0xff_fffa); // wraps past 2^24
        let mut s = Scoreboard::new(base, base.add(10));
        s.sacked(base.add(2), base.add(3));
        s.find_lost();
        assert_eq!(
            s.next_lost(),
            None,
            "two transmissions later: maybe reordered"
        );
        s.sacked(base.add(3), base.add(4));
        s.find_lost();
        assert_eq!(s.next_lost(), Some(base), "3 is three after 0");
        assert_eq!(s.next_lost(), None, "but two after 1");
        s.sacked(base.add(4), base.add(5));
        s.find_lost();
        assert_eq!(s.next_lost(), Some(base.add(1)));
        assert_eq!(s.next_lost(), None);
        assert_eq!(s.in_flight(), 10 - 3);
        // Both resent; 1's copy arrives, and 5..9 (sent before the resends) too: the resent
        // 0 is younger than them, so it is not lost yet.
        s.sent_packet(base, 1, false);
        s.sent_packet(base.add(1), 1, false);
        s.sacked(base.add(1), base.add(2));
        s.sacked(base.add(5), base.add(10));
        s.find_lost();
        assert_eq!(s.next_lost(), None);
        // Three new packets, sent after the resend of 0, arrive: its copy was lost too.
        for i in 10..13 {
            s.sent_packet(base.add(i), 1, false);
        }
        s.sacked(base.add(10), base.add(13));
        s.find_lost();
        assert_eq!(s.next_lost(), Some(base));
        assert!(s.holds(base.add(3)) && !s.holds(base));
        s.acked(base.add(13));
        assert_eq!((s.in_flight(), s.held, s.resent), (0, 0, 3));
        assert_eq!(s.delivered, 13);
    }

    #[test]
    fn a_read_request_holds_its_response_psns() {
        let mut s = Scoreboard::new(Psn::new(0), Psn::new(0));
        s.sent_packet(Psn::new(0), 4, true);
        s.sent_packet(Psn::new(4), 1, false);
        assert_eq!(s.in_flight(), 2);
        assert!(
            !s.holds(Psn::new(1)),
            "a response PSN is no packet the responder holds"
        );
        s.acked(Psn::new(4));
        assert_eq!((s.in_flight(), s.held), (1, 0));
        s.sent_packet(Psn::new(5), 1, true);
        s.sacked(Psn::new(4), Psn::new(6));
        assert_eq!(s.in_flight(), 0);
        assert!(s.holds(Psn::new(4)));
        assert!(
            !s.holds(Psn::new(5)),
            "the atomic is held, but its response is to come"
        );
    }
}
