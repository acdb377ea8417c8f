//! The decisions about programs that sleep on completion channels, as values with the
//! clock passed in: whether the program takes its own packets (`app_waits`), how long
//! a waiter polls before it sleeps (`SpinBudget`), and how long the engine thread naps
//! meanwhile (`Nap`). The driver's `channel.rs`, `shared.rs` and `nic.rs` hold the atomics
//! and the system calls around them.

use std::time::Duration;

/// A program that woke from a channel this recently is taken to be coming back to it.
pub const BACK_WITHIN_NS: u64 = 200_000;

/// How often the engine thread looks while waiters are busy, and at most how long it naps
/// while they sleep on.
pub const LOOK: Duration = Duration::from_millis(1);
/// The longest nap while the waiters sleep on.
pub const MAX_NAP: Duration = Duration::from_millis(50);

/// The longest spin before a sleep. It must outlast a sleeping peer's answer (its
/// wake-up and its turn): a cross-core wake-up costs 33 us on this VM kind (4 us on one
/// core), so a peer asleep answers in 40-70 us, and a ping-pong whose two sides both
/// slept would never find its way into step with a shorter probe.
pub const SPIN_MAX: Duration = Duration::from_micros(100);
/// The shortest spin worth making before a sleep.
pub const SPIN_MIN: Duration = Duration::from_micros(5);
/// The most waits slept through between two probes, after spins that kept missing.
pub const SKIP_MAX: u16 = 63;

/// Whether the program takes its packets by sleeping on completion channels: `waiters`
/// threads sleep on one now, or the last woke at `left_at` (ns; 0: never) less than
/// `BACK_WITHIN_NS` before `now` (read only if that decides).
pub fn app_waits(waiters: u32, left_at: u64, now: impl FnOnce() -> u64) -> bool {
    waiters > 0 || (left_at != 0 && now().saturating_sub(left_at) < BACK_WITHIN_NS)
}

/// How long a channel's waiter polls before it sleeps. A spin pays where the event comes
/// before a wake-up would have: a ping-pong's answer, taken as a polling program takes it.
/// So the waiter spins twice its typical wait, and after a spin that missed (the event came
/// later, or not at all) a probe of `SPIN_MAX`; each miss in a row doubles the waits it
/// then sleeps through at once (up to `SKIP_MAX`), so a waiter whose events come seldom or
/// late spins next to never, and one caught spin brings the spin back. The typical wait
/// alone cannot decide: a ping-pong whose two sides sleep waits a wake-up or two for each
/// answer, long enough to look slow for ever, though each would answer at once once
/// the other spun.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpinBudget {
    /// How long a wait for an event lately lasted (ns, a moving average).
    pub typical_ns: u32,
    /// Spins in a row that ended in a sleep.
    pub misses: u8,
    /// Waits to sleep through at once before the next probe.
    pub skip: u16,
}

impl SpinBudget {
    /// How long the next wait polls before sleeping: none while it skips, `SPIN_MAX` as a
    /// probe after a miss, else twice the typical wait within `SPIN_MIN` and `SPIN_MAX`.
    pub fn budget(self) -> Duration {
        if self.skip > 0 {
            Duration::ZERO
        } else if self.misses > 0 {
            SPIN_MAX
        } else {
            Duration::from_nanos(2 * u64::from(self.typical_ns)).clamp(SPIN_MIN, SPIN_MAX)
        }
    }

    /// A wait that polled `spun` first (`budget()`'s answer) lasted `d`: the typical wait
    /// goes a quarter of the way to it, and the spin caught the event, missed it, or was
    /// skipped.
    pub fn waited(self, d: Duration, spun: Duration) -> SpinBudget {
        let d_ns = d.as_nanos().min(u128::from(u32::MAX)) as u64;
        let typical_ns = ((3 * u64::from(self.typical_ns) + d_ns) / 4) as u32;
        let (misses, skip) = if spun.is_zero() {
            (self.misses, self.skip.saturating_sub(1))
        } else if d <= spun {
            (0, 0)
        } else {
            let misses = self.misses.saturating_add(1);
            // 0, 1, 3, 7, ... waits slept through after the 1st, 2nd, 3rd, 4th miss.
            let skip = (1u32 << (misses - 1).min(15)) - 1;
            (misses, skip.min(u32::from(SKIP_MAX)) as u16)
        };
        SpinBudget {
            typical_ns,
            misses,
            skip,
        }
    }

    /// As one word, for an atomic shared by a channel's waiters.
    pub fn to_bits(self) -> u64 {
        u64::from(self.typical_ns) | u64::from(self.misses) << 32 | u64::from(self.skip) << 40
    }

    /// From [`Self::to_bits`]'s word.
    pub fn from_bits(bits: u64) -> SpinBudget {
        SpinBudget {
            typical_ns: bits as u32,
            misses: (bits >> 32) as u8,
            skip: (bits >> 40) as u16,
        }
    }
}

/// The engine thread's naps while the program sleeps on its channels: `LOOK` while its
/// waiters keep waking (so a program that stops waiting is noticed within it), twice as
/// long after each look at which none woke, up to `MAX_NAP`; never past the engine's next
/// timer by more than `LOOK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nap {
    nap: Duration,
    /// The program's waits counted at the last look.
    waits: u64,
}

impl Default for Nap {
    fn default() -> Nap {
        Nap {
            nap: LOOK,
            waits: 0,
        }
    }
}

/// What the engine thread does at a look: nap this long, and whether a waiter that wakes
/// meanwhile must ring it (it naps longer than `LOOK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// How long to nap.
    pub nap: Duration,
    /// A waiter that wakes meanwhile must ring the engine thread (the nap is longer than
    /// `LOOK`).
    pub dozing: bool,
}

impl Nap {
    /// A look, the program having begun `waits` waits so far, with the engine's next timer
    /// due in `next` (None: none).
    pub fn look(&mut self, waits: u64, next: Option<Duration>) -> Look {
        self.nap = if waits == self.waits {
            (self.nap * 2).min(MAX_NAP)
        } else {
            LOOK
        };
        self.waits = waits;
        let nap = next.map_or(self.nap, |t| t.max(LOOK).min(self.nap));
        Look {
            nap,
            dozing: self.nap > LOOK,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_program_is_waiting_while_a_thread_sleeps_and_a_moment_after() {
        assert!(app_waits(1, 0, || 5_000_000));
        assert!(!app_waits(0, 0, || 5_000_000), "never waited");
        assert!(app_waits(0, 1_000_000, || 1_000_000 + BACK_WITHIN_NS - 1));
        assert!(!app_waits(0, 1_000_000, || 1_000_000 + BACK_WITHIN_NS));
    }

    /// Runs `waits` waits against a peer that answers `answer(i)` after the wait began
    /// (None: never within the wait, which ends at `MAX_WAIT`): the time spun in all.
    fn spin_time(
        s: &mut SpinBudget,
        waits: usize,
        answer: impl Fn(usize) -> Option<Duration>,
    ) -> Duration {
        const MAX_WAIT: Duration = Duration::from_secs(1);
        let mut spun = Duration::ZERO;
        for i in 0..waits {
            let b = s.budget();
            let d = answer(i).unwrap_or(MAX_WAIT);
            spun += b.min(d);
            *s = s.waited(d, b);
        }
        spun
    }

    #[test]
    fn a_ping_pong_spins_twice_its_typical_wait() {
        let mut s = SpinBudget::default();
        assert_eq!(s.budget(), SPIN_MIN, "no history: a short spin");
        spin_time(&mut s, 20, |_| Some(Duration::from_micros(15)));
        let b = s.budget();
        assert!(
            b > Duration::from_micros(25) && b <= Duration::from_micros(30),
            "{b:?}"
        );
        assert_eq!((s.misses, s.skip), (0, 0));
    }

    #[test]
    fn a_ping_pong_whose_sides_both_slept_gets_into_step() {
        // Each answer came after the peer's wake-up (60 us): the typical wait is long, but
        // a probe catches the next answer, and the spin stays.
        let mut s = SpinBudget {
            typical_ns: 140_000,
            misses: 0,
            skip: 0,
        };
        assert_eq!(s.budget(), SPIN_MAX);
        spin_time(&mut s, 1, |_| Some(Duration::from_micros(60)));
        assert_eq!((s.misses, s.skip), (0, 0));
        // The peer now spins too: answers in 12 us, and the spin shrinks to fit.
        spin_time(&mut s, 30, |_| Some(Duration::from_micros(12)));
        assert!(s.budget() <= Duration::from_micros(25), "{:?}", s.budget());
    }

    #[test]
    fn misses_back_off_and_one_catch_brings_the_spin_back() {
        let mut s = SpinBudget::default();
        let budgets: Vec<u64> = (0..20)
            .map(|_| {
                let b = s.budget();
                s = s.waited(Duration::from_millis(5), b);
                b.as_micros() as u64
            })
            .collect();
        // A short spin, then probes after 0, 1, 3 and 7 waits slept through.
        assert_eq!(
            budgets,
            [5, 100, 0, 100, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0]
        );
        // Skips are capped; a probe that catches its event ends the back-off.
        let mut s = SpinBudget::default();
        spin_time(&mut s, 2_000, |_| None);
        assert_eq!(s.skip.max(SKIP_MAX), SKIP_MAX);
        while s.budget().is_zero() {
            spin_time(&mut s, 1, |_| None);
        }
        spin_time(&mut s, 1, |_| Some(Duration::from_micros(30)));
        assert_eq!((s.misses, s.skip), (0, 0));
        assert!(!s.budget().is_zero());
    }

    #[test]
    fn an_idle_waiter_spins_next_to_never() {
        // Events a second apart: at most one probe in 60 waits once backed off.
        let mut s = SpinBudget::default();
        let spun = spin_time(&mut s, 1_000, |_| None);
        assert!(spun < SPIN_MAX * 30, "{spun:?} in 1000 waits");
        // Waiting for ever saturates, not wraps.
        let s = SpinBudget::default().waited(Duration::MAX, SPIN_MIN);
        assert_eq!(s.typical_ns, u32::MAX / 4);
    }

    #[test]
    fn the_word_holds_every_field() {
        let s = SpinBudget {
            typical_ns: u32::MAX - 7,
            misses: 200,
            skip: SKIP_MAX,
        };
        assert_eq!(SpinBudget::from_bits(s.to_bits()), s);
        assert_eq!(SpinBudget::from_bits(0), SpinBudget::default());
    }

    #[test]
    fn naps_grow_while_nobody_wakes_and_shrink_when_one_does() {
        let mut n = Nap::default();
        let naps: Vec<u64> = (0..8)
            .map(|_| n.look(0, None).nap.as_millis() as u64)
            .collect();
        assert_eq!(naps, [2, 4, 8, 16, 32, 50, 50, 50]);
        assert!(n.look(0, None).dozing);
        let l = n.look(1, None);
        assert_eq!(
            l,
            Look {
                nap: LOOK,
                dozing: false
            },
            "a waiter woke: looks every ms"
        );
        // A timer: served at the next look, within LOOK of when it is due.
        let mut n = Nap::default();
        for _ in 0..6 {
            n.look(0, None);
        }
        assert_eq!(
            n.look(0, Some(Duration::from_millis(3))).nap,
            Duration::from_millis(3)
        );
        assert_eq!(n.look(0, Some(Duration::from_micros(20))).nap, LOOK);
    }

    proptest! {
        /// Whatever the answers: no spin is longer than `SPIN_MAX`, a spin that caught its
        /// event leaves no back-off, and a skip is never longer than `SKIP_MAX`.
        #[test]
        fn spins_stay_bounded(answers in proptest::collection::vec(proptest::option::of(0u64..2_000_000), 1..300)) {
            let mut s = SpinBudget::default();
            for a in answers {
                let b = s.budget();
                prop_assert!(b <= SPIN_MAX);
                let d = Duration::from_nanos(a.unwrap_or(1_000_000_000));
                s = s.waited(d, b);
                prop_assert!(s.skip <= SKIP_MAX);
                if !b.is_zero() && d <= b {
                    prop_assert_eq!((s.misses, s.skip), (0, 0));
                }
                prop_assert_eq!(SpinBudget::from_bits(s.to_bits()), s);
            }
        }

        /// Progress bound: whatever the program does, a timer due in `t` waits for the
        /// engine thread's next look at most `max(t, LOOK)`, and no nap exceeds `MAX_NAP`;
        /// a waiter that wakes during a nap longer than `LOOK` is told to ring.
        #[test]
        fn no_timer_waits_past_its_due_by_more_than_a_look(
            steps in proptest::collection::vec((0u64..3, proptest::option::of(0u64..100_000_000)), 1..200)
        ) {
            let mut n = Nap::default();
            let mut waits = 0;
            for (woke, next) in steps {
                waits += woke;
                let next = next.map(Duration::from_nanos);
                let l = n.look(waits, next);
                prop_assert!(l.nap <= MAX_NAP);
                if let Some(t) = next {
                    prop_assert!(l.nap <= t.max(LOOK), "{l:?} for a timer in {t:?}");
                }
                prop_assert_eq!(l.dozing, n.nap > LOOK);
                if woke > 0 {
                    prop_assert!(!l.dozing, "waiters woke since the last look");
                }
            }
        }
    }
}
