//! The send window of selective repeat. It starts from the path, not from loss: twice the
//! delivery rate times the smallest RTT (the bandwidth-delay product, and room for the
//! ACKs' round trip, as BBR keeps in flight), so random loss (a lossy link, not a full
//! queue) costs nothing, and the window doubles each round trip while the rate keeps up.
//! Queues that overflow are another matter: a round trip that loses more than `CONGESTED`
//! of its packets while its RTT stands near the top of a range well above the floor (a
//! full queue: random loss comes with a short one) sets a limit of 0.7 of the window,
//! which then grows by `PROBE` packets a round trip (additive increase, multiplicative
//! decrease: flows that share a bottleneck converge to equal shares, and one beside a TCP
//! flow keeps its part of the queue).
//!
//! A path that marks ECN says so before it drops: the peer sends a CNP for requests that
//! came marked (`qp/ecn.rs`), and each round trip with CNPs cuts the window by half the
//! share of time they came (DCQCN's and DCTCP's alpha, a moving average over time),
//! down to `ECN_MIN`, below the go-back-N floor if need be (a LAN's incast); round trips
//! without grow it by `PROBE` until it no longer binds.

use crate::qp::ecn::CNP_GAP;
use crate::Nanos;

/// A round trip that loses more than this share of its packets met a full queue.
const CONGESTED: f64 = 0.02;
/// Losses a round trip needs, at least, to count as congested (a few lost of a small
/// window are noise).
const MIN_LOST: u64 = 8;
/// Packets the limit grows by each round trip without congestion.
const PROBE: u32 = 16;
/// A queue can be full only where the RTT has varied by this share of its floor: random
/// loss on a path whose queue stays short is no congestion.
const VARIES: f64 = 0.2;
/// A round trip met a full queue if its RTT stood in this top share of the recent range
/// (floor to largest).
const NEAR_TOP: f64 = 0.25;
/// An RTT floor below this keeps the window at go-back-N's: a LAN or a loopback, where
/// 512 PSNs cover the path, and where the host's own queues (one engine serving 64 QPs in
/// turn measures 7-13 ms of them) would pose as path and grow windows that only add to
/// them. A 50 ms path is well above it.
const LONG_PATH: Nanos = 20_000_000;
/// Round trips whose RTT the recent range covers.
const ROUNDS: usize = 8;
/// The weight of the latest share of CNPs in their moving average (DCQCN's g), per
/// `ALPHA_PERIOD` (DCQCN updates it on a 55 us timer: a time average, not one per round
/// trip, so a long path's is no slower).
const ECN_GAIN: f64 = 1.0 / 16.0;
const ALPHA_PERIOD: Nanos = 55_000;
/// The least window CNPs cut to, in packets.
const ECN_MIN: u32 = 16;

/// The window CNPs set, as DCQCN sets a rate: cut by half the average share of time the
/// CNPs came, then, round trips without, back halfway to where it was each (fast
/// recovery), and past it by `PROBE`, twice `PROBE`, ... (additive, then hyper increase).
#[derive(Debug, Clone, Copy)]
struct EcnLimit {
    now: u32,
    /// The window before the cut, then where the increase has got to.
    target: u32,
    /// Round trips without CNPs since the cut.
    calm: u32,
}

/// Round trips of fast recovery after a cut.
const FAST_RECOVERY: u32 = 5;

impl EcnLimit {
    /// A round trip without CNPs; None once it no longer binds (at `base`).
    fn calm_round(mut self, base: u32) -> Option<Self> {
        self.calm += 1;
        if self.calm > FAST_RECOVERY {
            let more = PROBE.saturating_mul(self.calm - FAST_RECOVERY);
            self.target = self.target.saturating_add(more);
        }
        self.now = self.now.midpoint(self.target) + 1;
        (self.now < base).then_some(self)
    }
}

/// What one QP measured of its path.
#[derive(Debug, Default)]
pub(crate) struct Window {
    min_rtt: Option<Nanos>,
    /// Rate samples (PSNs per second) of the last few round trips; their maximum counts.
    rates: [u64; ROUNDS],
    /// The RTT of each of the last few round trips (the smallest sample of each).
    rtts: [Nanos; ROUNDS],
    next: usize,
    /// Where the current round trip started: time, PSNs delivered and packets lost then.
    start: Option<(Nanos, u64, u64)>,
    /// The window congestion control set, once a round trip met a full queue (before:
    /// none, the window follows the delivery rate).
    limit: Option<u32>,
    /// The latest RTT sample, and the smallest of this round trip.
    last_rtt: Option<Nanos>,
    round_rtt: Option<Nanos>,
    /// CNPs this round trip.
    cnps: u32,
    /// The moving average of the share of time CNPs came (None: 1, none averaged yet).
    alpha: Option<f64>,
    /// The window CNPs set (None: none came, or it grew past the rest of the window).
    ecn: Option<EcnLimit>,
    /// The last round trip cut the window for CNPs: this one's came for packets sent
    /// before the cut (the queue they met is still draining), and cut nothing more.
    ecn_cut: bool,
}

impl Window {
    /// An RTT sample.
    pub(crate) fn rtt(&mut self, sample: Nanos) {
        let s = sample.max(1);
        self.min_rtt = Some(self.min_rtt.map_or(s, |m| m.min(s)));
        self.last_rtt = Some(s);
        self.round_rtt = Some(self.round_rtt.map_or(s, |m| m.min(s)));
    }

    /// The peer's CNP: a queue on the path is filling.
    pub(crate) fn cnp(&mut self) {
        self.cnps = self.cnps.saturating_add(1);
    }

    /// The round trip that took `dt` is over: CNPs cut the window by half their average
    /// share of the time; a round trip without lets it grow (`floor` as [`Self::size`]
    /// takes it).
    fn ecn_round(&mut self, dt: Nanos, floor: u32) {
        if self.cnps == 0 && self.ecn.is_none() && self.alpha.is_none() {
            return; // No CNP yet: nothing to average (alpha starts at 1 with the first).
        }
        let (base, window) = (self.base(floor, u32::MAX), self.size(floor, u32::MAX));
        let share = (f64::from(self.cnps) * CNP_GAP as f64 / dt.max(1) as f64).min(1.0);
        let keep = (1.0 - ECN_GAIN).powf(dt as f64 / ALPHA_PERIOD as f64);
        let alpha = keep * self.alpha.unwrap_or(1.0) + (1.0 - keep) * share;
        self.alpha = Some(alpha);
        let cut = self.cnps > 0 && !self.ecn_cut;
        self.ecn_cut = cut;
        if cut {
            self.ecn = Some(EcnLimit {
                now: ((f64::from(window) * (1.0 - alpha / 2.0)) as u32).max(ECN_MIN),
                target: window,
                calm: 0,
            });
        } else if self.cnps == 0 {
            self.ecn = self.ecn.and_then(|e| e.calm_round(base));
        }
        self.cnps = 0;
    }

    /// Whether a round trip with RTT `rtt` met a full queue: the RTT has varied well
    /// above its floor of late, and this one stands near the top of that range. Judged
    /// against the range and not the floor alone, because a flow that starts beside
    /// another never sees the path empty: its floor holds the other's queue, and it would
    /// see no queue where the other sees a full one, grow while the other yields, and
    /// keep the larger share.
    fn full(&self, rtt: Nanos, floor: Nanos) -> bool {
        let top = self.rtts.iter().copied().max().unwrap_or(0).max(rtt);
        let range = top.saturating_sub(floor) as f64;
        range > VARIES * floor as f64
            && rtt.saturating_sub(floor) as f64 >= (1.0 - NEAR_TOP) * range
    }

    /// By `now`, `delivered` PSNs have been delivered and `lost` packets found lost, in all.
    /// Each round trip (the smallest RTT, at least) gives a rate sample and a loss share.
    pub(crate) fn sample(&mut self, now: Nanos, delivered: u64, lost: u64, floor: u32) {
        let Some(min_rtt) = self.min_rtt else { return };
        let Some((t0, d0, l0)) = self.start else {
            return self.new_round(now, delivered, lost);
        };
        // A round trip as the packets see it, queue and all: deliveries come in bursts
        // (an ACK every 64 packets, QPs served in turn), and a shorter interval catches
        // one burst too many or too few.
        let dt = now.saturating_sub(t0);
        if dt < min_rtt.max(self.last_rtt.unwrap_or(0)) {
            return;
        }
        self.ecn_round(dt, floor);
        if min_rtt < LONG_PATH {
            // The floor is the window on a short path (and stays so: the RTT floor only
            // falls): rate, RTT range and loss limit serve no purpose there.
            return self.new_round(now, delivered, lost);
        }
        let (d, l) = (delivered.saturating_sub(d0), lost.saturating_sub(l0));
        // The window this round trip ran with.
        let size = self.current().max(floor);
        let rtt = self.round_rtt.or(self.last_rtt).unwrap_or(min_rtt);
        let full = self.full(rtt, min_rtt);
        self.rates[self.next] = (d as u128 * 1_000_000_000 / dt as u128) as u64;
        self.rtts[self.next] = rtt;
        self.next = (self.next + 1) % ROUNDS;
        self.new_round(now, delivered, lost);
        if full && l >= MIN_LOST && l as f64 > CONGESTED * (d + l) as f64 {
            // Additive increase, multiplicative decrease on a signal every flow through
            // the queue shares (it overflows for all): flows converge to equal shares.
            self.limit = Some(((f64::from(size) * 0.7) as u32).max(floor));
        } else if let Some(limit) = self.limit.as_mut() {
            *limit = limit.saturating_add(PROBE);
        }
    }

    /// A round trip starts at `now`, with `delivered` PSNs delivered and `lost` packets
    /// found lost so far.
    fn new_round(&mut self, now: Nanos, delivered: u64, lost: u64) {
        self.start = Some((now, delivered, lost));
        self.round_rtt = None;
    }

    /// Twice the largest recent rate times the RTT floor.
    fn bdp_window(&self) -> u32 {
        let Some(rtt) = self.min_rtt else { return 0 };
        let rate = self.rates.iter().copied().max().unwrap_or(0);
        let bdp = rate as u128 * rtt as u128 / 1_000_000_000;
        u32::try_from(2 * bdp).unwrap_or(u32::MAX)
    }

    /// The window before bounds: the limit once congestion set one (the rate times a
    /// floor that may hold another flow's queue would misjudge the share), until then
    /// twice the bandwidth-delay product, which doubles each round trip while the rate
    /// keeps up (a start as fast as TCP's slow start, that random loss does not end).
    fn current(&self) -> u32 {
        self.limit.unwrap_or_else(|| self.bdp_window())
    }

    /// The window in PSNs before CNPs, within `floor..=cap`.
    fn base(&self, floor: u32, cap: u32) -> u32 {
        if self.min_rtt.is_none_or(|m| m < LONG_PATH) {
            return floor.min(cap);
        }
        self.current().clamp(floor, cap)
    }

    /// The window in PSNs: within `floor..=cap`, or below the floor where CNPs cut it.
    pub(crate) fn size(&self, floor: u32, cap: u32) -> u32 {
        let base = self.base(floor, cap);
        self.ecn.map_or(base, |e| e.now.min(base))
    }

    pub(crate) fn min_rtt(&self) -> Option<Nanos> {
        self.min_rtt
    }

    /// The time between two packets when paced: the window spread over 4/5 of the RTT
    /// floor (so a window still grows, as it doubles each round trip at the start). None
    /// on a short path, whose window is the go-back-N floor and whose packets go as they
    /// are ready. A window sent at once from a fast port into a slower path's queue stands
    /// there for a while: long enough to be marked CE, and, 512 packets at a time into 100
    /// Mbit/s, to fill it.
    pub(crate) fn pace_gap(&self, floor: u32, cap: u32) -> Option<Nanos> {
        let rtt = self.min_rtt.filter(|&m| m >= LONG_PATH)?;
        let w = u64::from(self.size(floor, cap).max(1));
        Some(rtt * 4 / (5 * w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twice_the_delivered_rate_times_the_rtt_floor() {
        let mut w = Window::default();
        assert_eq!(w.size(512, 1 << 20), 512);
        w.rtt(50_000_000);
        w.sample(0, 0, 0, 512);
        w.sample(100_000_000, 2_000, 10, 512); // 20,000 PSNs a second, 0.5 % lost
        assert_eq!(w.size(512, 1 << 20), 2 * 1_000, "random loss costs nothing");
        assert_eq!(w.size(512, 1_500), 1_500);
        w.sample(110_000_000, 2_100, 10, 512); // too short a round trip: no sample
        assert_eq!(w.size(16, 1 << 20), 2_000);
    }

    #[test]
    fn random_loss_with_a_short_queue_is_no_congestion() {
        let mut w = Window::default();
        w.rtt(50_000_000);
        w.sample(0, 0, 0, 16);
        w.rtt(60_000_000);
        w.sample(60_000_000, 1_200, 120, 16); // 9 % lost, 10 ms queued
        assert_eq!(w.size(16, 1 << 20), 2_000);
    }

    #[test]
    fn a_standing_queue_without_loss_is_no_congestion() {
        let mut w = Window::default();
        w.rtt(50_000_000);
        w.sample(0, 0, 0, 16);
        w.sample(50_000_000, 500, 0, 16);
        assert_eq!(w.size(16, 1 << 20), 1_000);
        w.rtt(100_000_000); // a queue as long as the path, but nothing lost
        w.sample(150_000_000, 1_500, 0, 16);
        assert_eq!(
            w.size(16, 1 << 20),
            1_000,
            "the rate, not the queue, sizes it"
        );
    }

    #[test]
    fn a_short_path_keeps_the_floor() {
        let mut w = Window::default();
        w.rtt(10_000_000);
        w.sample(0, 0, 0, 512);
        w.sample(10_000_000, 100_000, 0, 512); // 10 M PSNs a second: 200,000 by the rate
        assert_eq!(w.size(512, 1 << 20), 512);
    }

    #[test]
    fn a_congested_round_trip_cuts_the_window_which_then_grows_back() {
        let mut w = Window::default();
        w.rtt(50_000_000);
        w.sample(0, 0, 0, 16);
        w.sample(50_000_000, 1_000, 0, 16); // 20,000 PSNs a second
        assert_eq!(w.size(16, 1 << 20), 2_000);
        w.rtt(150_000_000); // 100 ms queued: full
        w.sample(200_000_000, 4_000, 150, 16); // 5 % lost
        assert_eq!(w.size(16, 1 << 20), 1_400, "0.7 of 2,000");
        w.rtt(50_000_000); // drained
        w.sample(350_000_000, 7_000, 150, 16);
        assert_eq!(w.size(16, 1 << 20), 1_400 + PROBE);
        w.rtt(150_000_000);
        w.sample(500_000_000, 10_000, 157, 16); // 7 lost: too few to count
        assert_eq!(w.size(16, 1 << 20), 1_400 + 2 * PROBE);
        w.rtt(150_000_000);
        w.sample(650_000_000, 10_100, 257, 64); // a collapse
        assert_eq!(w.size(64, 1 << 20), 1_002, "0.7 of the window");
        w.rtt(60_000_000); // 10 % lost, but the queue is short (well below its top)
        w.sample(800_000_000, 11_000, 357, 64);
        assert_eq!(w.size(64, 1 << 20), 1_002 + PROBE);
    }

    #[test]
    fn cnps_cut_by_half_their_share_and_round_trips_without_bring_it_back() {
        let mut w = Window::default();
        w.rtt(100_000); // a LAN: the floor rules, until CNPs come
        w.sample(0, 0, 0, 512);
        assert_eq!(w.size(512, 1 << 20), 512);
        w.cnp();
        w.sample(100_000, 500, 0, 512);
        // alpha starts at 1, keeps (15/16)^(100/55) = 0.889 of it and takes the rest from
        // one CNP's 50 us of the 100 us: 0.944; 512 x (1 - 0.944 / 2)
        assert_eq!(w.size(512, 1 << 20), 270);
        w.cnp();
        w.sample(200_000, 1_000, 0, 512);
        assert_eq!(
            w.size(512, 1 << 20),
            270,
            "CNPs for what was sent before the cut"
        );
        w.sample(300_000, 1_500, 0, 512);
        assert_eq!(w.size(512, 1 << 20), 392, "halfway back to 512");
        for i in 0..12 {
            w.sample(400_000 + i * 100_000, 2_000 + i * 500, 0, 512);
        }
        assert_eq!(
            w.size(512, 1 << 20),
            512,
            "back at the floor, where it stops"
        );
        for i in 0..400 {
            w.cnp();
            w.sample(20_000_000 + i * 100_000, 60_000 + i * 500, 0, 512);
        }
        assert_eq!(w.size(512, 1 << 20), ECN_MIN, "a queue that never drains");
    }

    #[test]
    fn on_a_long_path_the_cut_is_the_share_of_time_cnps_came() {
        let mut w = Window::default();
        w.rtt(50_000_000);
        w.sample(0, 0, 0, 16);
        w.sample(50_000_000, 1_000, 0, 16); // 2,000 by the rate
        for _ in 0..100 {
            w.cnp(); // 5 ms of the 50 ms round trip
        }
        w.sample(100_000_000, 2_000, 0, 16);
        assert_eq!(w.size(16, 1 << 20), 1_900, "a 5 % cut (alpha 0.1)");
    }

    #[test]
    fn a_floor_that_holds_another_flows_queue_still_sees_it_fill() {
        // Started beside a flow whose queue stood at 50 ms: 100 ms looks like the path.
        let mut w = Window::default();
        w.rtt(100_000_000);
        w.sample(0, 0, 0, 16);
        w.sample(100_000_000, 1_000, 0, 16);
        assert_eq!(w.size(16, 1 << 20), 2_000);
        w.rtt(150_000_000); // the queue overflows for both flows
        w.sample(250_000_000, 2_500, 100, 16);
        assert_eq!(
            w.size(16, 1 << 20),
            1_400,
            "it yields as the other flow does"
        );
    }
}
