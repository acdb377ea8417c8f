//! How many bytes of duplicate READs a responder answers again. IBA has a responder
//! re-execute every duplicate READ, so each small request packet may cost a whole message
//! of responses: a flood of copies (from an on-path attacker, or a peer that knows the
//! PSNs) would be reflected many times over onto the requester and the network. A
//! requester that lost a response asks again once per loss or timeout, for what it lost;
//! so duplicates are answered from a token bucket that earns every byte of a new READ and
//! refills with time (`PeerLimits::dup_read_bytes_per_sec`, a second's worth at most, or
//! one READ's length if larger). A duplicate is answered while the bucket is not in debt,
//! and may take it into debt by its length: a legitimate retry of a large READ is answered
//! whole, and a flood gets back at most the READs answered plus the rate.

use crate::Nanos;

#[derive(Debug, Default)]
pub(crate) struct ReadBudget {
    /// Bytes that may still be answered again (negative: in debt).
    tokens: i64,
    /// When it last refilled; None until the first use (then it starts full).
    at: Option<Nanos>,
}

impl ReadBudget {
    /// The bucket's size: a second's worth at `rate`, or `len` if larger.
    fn cap(rate: u64, len: u64) -> i64 {
        rate.max(len).min(i64::MAX as u64) as i64
    }

    fn refill(&mut self, now: Nanos, rate: u64) {
        let Some(at) = self.at else {
            self.at = Some(now);
            self.tokens = Self::cap(rate, 0);
            return;
        };
        let dt = now.saturating_sub(at);
        let earned = (u128::from(dt) * u128::from(rate) / 1_000_000_000).min(i64::MAX as u128);
        if earned > 0 {
            self.at = Some(now);
            self.tokens = self
                .tokens
                .saturating_add(earned as i64)
                .min(Self::cap(rate, 0).max(self.tokens));
        }
    }

    /// A new READ of `len` bytes was answered: as many bytes may be answered again.
    pub(crate) fn earn(&mut self, now: Nanos, rate: u64, len: u64) {
        self.refill(now, rate);
        let cap = Self::cap(rate, len).max(self.tokens);
        self.tokens = self.tokens.saturating_add(len as i64).min(cap);
    }

    /// Whether a duplicate READ may be answered now (the bucket is not in debt).
    pub(crate) fn affords(&mut self, now: Nanos, rate: u64) -> bool {
        self.refill(now, rate);
        self.tokens >= 0
    }

    /// A duplicate READ of `len` bytes is answered.
    pub(crate) fn pay(&mut self, len: u64) {
        self.tokens = self.tokens.saturating_sub(len.min(i64::MAX as u64) as i64);
    }

    #[cfg(test)]
    fn spend(&mut self, now: Nanos, rate: u64, len: u64) -> bool {
        let ok = self.affords(now, rate);
        if ok {
            self.pay(len);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u64 = 1 << 20;
    const SEC: Nanos = 1_000_000_000;

    #[test]
    fn a_flood_gets_back_the_rate_and_what_was_read() {
        let mut b = ReadBudget::default();
        let (mut answered, mut now) = (0u64, 0);
        b.earn(now, RATE, 64 << 10);
        // 100,000 copies of a 64 KiB READ over two seconds.
        for i in 0..100_000u64 {
            now = i * 2 * SEC / 100_000;
            if b.spend(now, RATE, 64 << 10) {
                answered += 64 << 10;
            }
        }
        // A full bucket (1 MiB), two seconds of refill, the READ's own 64 KiB (beyond a
        // full bucket it earns nothing), and one duplicate's overdraft.
        assert!(answered <= 3 * RATE + (64 << 10), "{answered}");
        assert!(answered >= 3 * RATE - (64 << 10), "{answered}");
    }

    #[test]
    fn a_retry_of_a_large_read_is_answered_whole_once() {
        let mut b = ReadBudget::default();
        let len = 64 * RATE;
        b.earn(0, RATE, len);
        assert!(b.spend(1, RATE, len), "the first retry");
        assert!(b.spend(2, RATE, len), "a second, into debt");
        assert!(!b.spend(3, RATE, len), "in debt");
        // Time pays the debt back.
        assert!(b.spend(3 + 64 * SEC, RATE, len));
    }

    #[test]
    fn new_reads_earn_retries() {
        let mut b = ReadBudget::default();
        assert!(b.spend(0, RATE, 2 * RATE));
        assert!(!b.spend(1, RATE, 4096), "in debt after an overdraft");
        for _ in 0..4 {
            b.earn(2, RATE, RATE);
        }
        assert!(b.spend(2, RATE, 4096));
    }
}
