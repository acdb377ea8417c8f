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

/// The longest spin before a sleep, and the shortest worth making.
pub const SPIN_MAX: Duration = Duration::from_micros(50);
/// The shortest spin worth making before a sleep.
pub const SPIN_MIN: Duration = Duration::from_micros(5);

/// Whether the program takes its packets by sleeping on completion channels: `waiters`
/// threads sleep on one now, or the last woke at `left_at` (ns; 0: never) less than
/// `BACK_WITHIN_NS` before `now` (read only if that decides).
pub fn app_waits(waiters: u32, left_at: u64, now: impl FnOnce() -> u64) -> bool {
    waiters > 0 || (left_at != 0 && now().saturating_sub(left_at) < BACK_WITHIN_NS)
}

/// How long a channel's waiter polls before it sleeps: twice its typical wait, if that is
/// short (a ping-pong's answer is then taken without a wake-up), else not at all.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpinBudget {
    /// How long a wait for an event lately lasted (ns, a moving average).
    pub typical_ns: u64,
}

impl SpinBudget {
    /// How long to poll before sleeping: twice the typical wait, within `SPIN_MIN` and
    /// `SPIN_MAX`; none when the typical wait is longer than `SPIN_MAX`.
    pub fn budget(self) -> Duration {
        if self.typical_ns > SPIN_MAX.as_nanos() as u64 {
            return Duration::ZERO;
        }
        Duration::from_nanos(2 * self.typical_ns).clamp(SPIN_MIN, SPIN_MAX)
    }

    /// A wait lasted `d`: the typical wait goes a quarter of the way to it.
    pub fn waited(self, d: Duration) -> SpinBudget {
        let d = d.as_nanos().min(u128::from(u32::MAX)) as u64;
        SpinBudget {
            typical_ns: (3 * self.typical_ns + d) / 4,
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

    #[test]
    fn a_ping_pong_spins_and_an_idle_waiter_does_not() {
        let mut s = SpinBudget::default();
        assert_eq!(s.budget(), SPIN_MIN, "no history: a short spin");
        for _ in 0..20 {
            s = s.waited(Duration::from_micros(15));
        }
        let b = s.budget();
        assert!(
            b > Duration::from_micros(25) && b <= Duration::from_micros(30),
            "{b:?}"
        );
        // One long wait (the peer paused) stops the spin; quick ones bring it back.
        s = s.waited(Duration::from_millis(2));
        assert_eq!(s.budget(), Duration::ZERO);
        for _ in 0..12 {
            s = s.waited(Duration::from_micros(15));
        }
        assert!(s.budget() > Duration::ZERO);
        // Waiting for ever saturates, not wraps.
        assert_eq!(
            SpinBudget {
                typical_ns: u64::MAX / 8
            }
            .waited(Duration::MAX)
            .budget(),
            Duration::ZERO
        );
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
