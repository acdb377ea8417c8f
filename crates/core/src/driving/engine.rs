//! The engine thread's decisions, as a value with the clock passed in: when it drives the
//! device, leaves it to the application, polls on, looks, or sleeps and for how long.
//! The driver's loop (`oxrdma/src/nic.rs`) asks at each of its steps and carries the
//! answer out with its locks, epoll and timers; the thread simulator asks the same.
//!
//! It drives the device while packets move, polls on for `SPIN` after them where a core
//! is free, and otherwise sleeps on a doorbell, its deadline timer and the socket.
//!
//! An application that busy-polls a CQ drives the device itself, taking every packet that
//! arrives and serving the timers, so meanwhile this thread sleeps: the socket is not
//! watched, no deadline is set, and posts do not ring. When a poll finds completions the
//! application may go and wait elsewhere (`handoff.rs`); this thread looks every
//! `RECHECK` whether the application still polls.
//!
//! A program that sleeps on a completion channel takes its packets there itself: while it
//! does (and a moment after it wakes, as it will be back) this thread neither watches the
//! socket nor sets a deadline; it looks every millisecond, less often while the waiter
//! sleeps on (`waiters::Nap`).
//!
//! A bandwidth client's polls find completions often, so this thread, woken by a packet,
//! would go on driving for as long as packets move, the application spinning at the lock
//! meanwhile. Once the hand-offs show that the application comes straight back after such
//! polls, this thread leaves the device to it after one turn if it called in meanwhile:
//! client CPU per GB 7-10 % lower, 64 KiB WRITE 1.04-1.10x.
//!
//! It polls on between packets only while a core is free for it, and not after a stream
//! (`Streak`): on a host with fewer cores than busy threads (two cores running a
//! ping-pong's two application threads) a polling NIC thread takes the core from the
//! thread that would answer (200 idle polls before sleeping gave the passive-target
//! `perf write-lat` 170 us per half round trip on a 2-core host, none 33 us). Where a core
//! is free, as for the target of READs or atomics whose application does nothing, polling
//! on saves each request a wake-up: `perf read-lat` 23.8 -> 6.8 us.

use super::app::AppSeen;
use super::waiters::{Look, Nap};
use crate::Nanos;
use std::time::Duration;

/// How often this thread looks whether a polling application still polls.
pub const RECHECK: Duration = Duration::from_millis(1);

/// How long this thread polls on after the last packet it moved, if a core is free for
/// it, before it sleeps.
pub const SPIN: Duration = Duration::from_micros(200);

/// Longest sleep (so a stop request is seen even if the doorbell is missed).
pub const MAX_SLEEP: Duration = Duration::from_millis(50);

/// A run of turns that moved more packets than this between two idle ones is a stream,
/// after which this thread does not poll on: a stream's packets come in bursts that the
/// socket holds until the thread wakes, so polling between them bought no bandwidth and
/// cost a 64 KiB WRITE target 4-6 % of its CPU (veth, loopback). A passive target's READ
/// or atomic moves two.
const STREAM: usize = 16;

/// What ended a sleep (the strongest, if several did).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Woke {
    /// Only time passed.
    Time,
    /// The doorbell: work posted, a CQ armed, the device closing.
    Doorbell,
    /// A packet arrived on the watched socket.
    Packet,
}

/// What the engine thread does next, before it touches the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// The program sleeps on its channels and takes the packets itself: serve the due
    /// timers (and any packet left), leave the socket unwatched and the deadline unset,
    /// then ask `looked` how long to nap.
    Look,
    /// Sleep this long without touching the device, then tell `slept`. `clear_deadline`:
    /// the application polls and serves the timers (a probe deadline its ACK made stale
    /// would wake this thread for nothing).
    Sleep {
        /// How long to sleep.
        timeout: Duration,
        /// Clear the deadline timer first: the polling application serves the timers.
        clear_deadline: bool,
    },
    /// Lock the device and ask `turn`.
    Turn,
}

/// What the engine thread does with the device locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Unlock and sleep `RECHECK` (then `slept`): the application called in during this
    /// thread's last turn and comes straight back after finding completions, so it moves
    /// the packets itself.
    Leave,
    /// Drive the device, then tell `driven`. `taken_over`: time woke this thread and the
    /// application no longer polls, so whatever waited since its last poll did so for a
    /// hand-off it skipped: the hand-off score starts again.
    Drive {
        /// The application stopped polling and this thread takes the device back: the
        /// hand-off score starts again.
        taken_over: bool,
    },
}

/// What the engine thread does after a turn that drove the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Drive again at once: packets moved.
    Again,
    /// Yield the core, then drive again: packets moved lately and a core is free.
    Spin,
    /// Say it dozes, watch the socket unless the application takes it
    /// (`AppSeen::leaves_socket`), ask `sleep_after` how long to sleep, look at the work
    /// posted meanwhile, and sleep if there is none.
    Sleep,
}

/// The engine thread's state between its steps.
#[derive(Debug, Clone, Copy)]
pub struct EngineThread {
    /// Whether a packet or a post woke this thread (else a timer did).
    work: bool,
    /// Whether its last turn moved packets (it did not sleep since).
    moving: bool,
    /// When it last moved packets.
    moved_at: Option<Nanos>,
    streak: Streak,
    naps: Nap,
}

impl Default for EngineThread {
    fn default() -> EngineThread {
        EngineThread {
            work: true,
            moving: false,
            moved_at: None,
            streak: Streak::default(),
            naps: Nap::default(),
        }
    }
}

impl EngineThread {
    /// The first decision of a step.
    pub fn before(&self, app: &AppSeen, now: Nanos) -> Before {
        if app.waits(now) {
            return Before::Look;
        }
        if !app.armed {
            if app.polls(now) {
                return Before::Sleep {
                    timeout: RECHECK,
                    clear_deadline: true,
                };
            }
            if let (false, Some(left)) = (self.work, app.active_for(now)) {
                // A timer, while the application still calls in: its next poll serves
                // the engine's timers, and if there is none, this thread looks again.
                return Before::Sleep {
                    timeout: left,
                    clear_deadline: false,
                };
            }
        }
        Before::Turn
    }

    /// After a look (`Before::Look`), the program having begun `waits` sleeps on its
    /// channels so far, and the engine's next timer due in `next`: how long to nap.
    pub fn looked(&mut self, waits: u64, next: Option<Duration>) -> Look {
        self.moving = false;
        self.naps.look(waits, next)
    }

    /// A sleep ended.
    pub fn slept(&mut self, woke: Woke) {
        self.work = woke != Woke::Time;
    }

    /// The posted work seen after watching was the reason not to sleep.
    pub fn pending(&mut self) {
        self.work = true;
    }

    /// With the device locked; `called`: an application thread polled or posted since the
    /// last turn.
    pub fn turn(&mut self, called: bool, app: &AppSeen) -> Turn {
        if called && self.moving && app.score.skipping() && !app.armed {
            self.moving = false;
            return Turn::Leave;
        }
        Turn::Drive {
            taken_over: !self.work,
        }
    }

    /// The turn moved `moved` packets, and the engine's next timer is due in `next`:
    /// what the deadline timer is set to (None: not armed). Only asked when nothing moved
    /// (a turn that moved packets comes back at once). While the application calls in,
    /// its polls serve the timers.
    pub fn deadline(&self, app: &AppSeen, now: Nanos, next: Option<Duration>) -> Option<Duration> {
        next.filter(|_| !app.serves_timers(now))
    }

    /// After a turn that moved `moved` packets: what next. `waiter`: a thread sleeps on a
    /// completion channel (it takes the packets that come: polling on would only fight it
    /// for them). `core_free` is asked only if polling on is worth it.
    pub fn driven(
        &mut self,
        moved: usize,
        waiter: bool,
        now: Nanos,
        core_free: impl FnOnce() -> bool,
    ) -> After {
        self.moving = moved > 0;
        if self.moving {
            self.moved_at = Some(now);
        }
        let after_stream = self.streak.turn(moved);
        self.work = true;
        if self.moving && !waiter {
            return After::Again;
        }
        let lately = self
            .moved_at
            .is_some_and(|t| now.saturating_sub(t) < SPIN.as_nanos() as Nanos);
        if !after_stream && !waiter && lately && core_free() {
            return After::Spin;
        }
        After::Sleep
    }

    /// How long to sleep after `After::Sleep`, the socket `watched` now or left to the
    /// application, and whether this thread dozes: a waiter that leaves meanwhile must
    /// ring it, or packets would wait in the unwatched socket until the sleep ends. The
    /// driver says it dozes before it decides the watch, so that either the watch sees
    /// the waiter or the waiter sees the word. A socket left to an application that polls
    /// is looked at again within `RECHECK`, as when this thread finds it polling.
    pub fn sleep_after(&self, watched: bool) -> Look {
        if watched {
            Look {
                nap: MAX_SLEEP,
                dozing: true,
            }
        } else {
            Look {
                nap: RECHECK,
                dozing: false,
            }
        }
    }
}

/// Packets moved since the engine thread was last idle, to tell a stream from requests.
#[derive(Debug, Default, Clone, Copy)]
struct Streak {
    run: usize,
    streamed: bool,
}

impl Streak {
    /// A turn moved `moved` packets: whether the last run of turns that moved packets was
    /// a stream (more than `STREAM`).
    fn turn(&mut self, moved: usize) -> bool {
        if moved > 0 {
            self.run += moved;
        } else if self.run > 0 {
            self.streamed = self.run > STREAM;
            self.run = 0;
        }
        self.streamed
    }
}

#[cfg(test)]
mod tests {
    use super::super::handoff::{Score, SKIP_AT};
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_stream_is_told_from_requests() {
        let mut s = Streak::default();
        // A passive target's READs: a request in, its response out, then idle.
        for _ in 0..10 {
            s.turn(1);
            s.turn(1);
            assert!(!s.turn(0));
        }
        // A WRITE stream's GRO bursts and their ACK, then idle (and idle again).
        s.turn(40);
        s.turn(1);
        s.turn(23);
        assert!(s.turn(0));
        assert!(s.turn(0));
        // Requests again.
        s.turn(2);
        assert!(!s.turn(0));
    }

    #[test]
    fn a_polling_application_keeps_the_engine_thread_asleep_and_a_waiter_makes_it_look() {
        let e = EngineThread::default();
        let now = 10 * MS;
        let polling = AppSeen {
            polling: true,
            polled_at: now - 1_000,
            ..AppSeen::default()
        };
        assert_eq!(
            e.before(&polling, now),
            Before::Sleep {
                timeout: RECHECK,
                clear_deadline: true
            }
        );
        let armed = AppSeen {
            armed: true,
            ..polling
        };
        assert_eq!(
            e.before(&armed, now),
            Before::Turn,
            "it sleeps on a channel"
        );
        let waiting = AppSeen {
            waiters: 1,
            ..AppSeen::default()
        };
        assert_eq!(e.before(&waiting, now), Before::Look);
        assert_eq!(e.before(&AppSeen::default(), now), Before::Turn);
    }

    #[test]
    fn a_timer_while_the_application_calls_in_waits_for_its_poll() {
        let mut e = EngineThread::default();
        let now = 10 * MS;
        // Found completions 50 us ago after polling: no longer polling, still active.
        let app = AppSeen {
            polled_at: now - 50_000,
            ..AppSeen::default()
        };
        e.slept(Woke::Doorbell);
        assert_eq!(e.before(&app, now), Before::Turn, "work woke it");
        e.slept(Woke::Time);
        assert_eq!(
            e.before(&app, now),
            Before::Sleep {
                timeout: Duration::from_nanos(150_000),
                clear_deadline: false
            }
        );
        assert_eq!(e.deadline(&app, now, Some(RECHECK)), None);
        let later = now + MS;
        assert_eq!(e.before(&app, later), Before::Turn);
        assert_eq!(e.turn(false, &app), Turn::Drive { taken_over: true });
        assert_eq!(e.deadline(&app, later, Some(RECHECK)), Some(RECHECK));
    }

    #[test]
    fn a_bandwidth_client_that_comes_back_gets_the_device_after_one_turn() {
        let mut e = EngineThread::default();
        let app = AppSeen {
            score: Score(SKIP_AT),
            ..AppSeen::default()
        };
        assert_eq!(e.turn(true, &app), Turn::Drive { taken_over: false });
        assert_eq!(e.driven(5, false, MS, || true), After::Again);
        assert_eq!(e.turn(true, &app), Turn::Leave);
        e.slept(Woke::Packet);
        assert_eq!(e.turn(true, &app), Turn::Drive { taken_over: false });
        let low = AppSeen {
            score: Score(SKIP_AT - 1),
            ..app
        };
        e.driven(5, false, MS, || true);
        assert_eq!(e.turn(true, &low), Turn::Drive { taken_over: false });
    }

    #[test]
    fn it_polls_on_after_requests_where_a_core_is_free_and_not_after_a_stream() {
        let mut e = EngineThread::default();
        assert_eq!(e.driven(1, false, MS, || panic!("not asked")), After::Again);
        assert_eq!(e.driven(0, false, MS + 10_000, || true), After::Spin);
        assert_eq!(e.driven(0, false, MS + 20_000, || false), After::Sleep);
        assert_eq!(
            e.driven(0, false, MS + 300_000, || panic!("too long ago")),
            After::Sleep
        );
        assert_eq!(e.driven(1, true, 2 * MS, || true), After::Sleep, "a waiter");
        // A stream.
        for _ in 0..5 {
            e.driven(10, false, 3 * MS, || true);
        }
        assert_eq!(e.driven(0, false, 3 * MS + 1, || true), After::Sleep);
    }
}
