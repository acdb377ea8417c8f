//! What the application threads have told a device, as the engine thread and the posting
//! and polling threads read it, and the decisions those threads make on their own paths.
//!
//! Application threads do NIC work too: posting transmits at once, and polling an empty CQ
//! moves packets. While an application polls like that, the engine thread keeps out of its
//! way (on two cores, a third thread woken by every packet only steals time from the two
//! that matter); a poll that finds completions hands the socket back to it.

use super::handoff::Score;
use super::waiters;
use crate::Nanos;
use std::time::Duration;

/// An application that polled an empty CQ this recently is busy-polling (and so drives the
/// device itself), unless a later poll found completions.
pub const APP_ACTIVE_NS: Nanos = 200_000;

/// What the application threads have done lately (the driver keeps each in an atomic).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AppSeen {
    /// The last CQ poll found nothing: the application will poll (and drive) again.
    pub polling: bool,
    /// When an application thread last polled a CQ and found nothing (0: never; taken
    /// once in a while, not at every poll).
    pub polled_at: Nanos,
    /// Whether a CQ is armed for a completion channel.
    pub armed: bool,
    /// Threads sleeping on a completion channel that move the packets that wake them.
    pub waiters: u32,
    /// When the last of them woke (0: never).
    pub waiter_left_at: Nanos,
    /// Sleeps begun on completion channels so far.
    pub waits: u64,
    /// The hand-off score (`handoff.rs`).
    pub score: Score,
}

impl AppSeen {
    /// How long an application that polled a CQ and found nothing is still taken to be
    /// active (None: longer ago than `APP_ACTIVE_NS`): its next poll serves the engine's
    /// timers.
    pub fn active_for(&self, now: Nanos) -> Option<Duration> {
        (self.polled_at + APP_ACTIVE_NS)
            .checked_sub(now)
            .filter(|&left| left > 0)
            .map(Duration::from_nanos)
    }

    /// Whether an application thread serves the engine's timers in its calls: it polled a
    /// CQ lately. Else the engine thread wakes for each (`Engine::set_app_serves_timers`).
    pub fn serves_timers(&self, now: Nanos) -> bool {
        self.active_for(now).is_some()
    }

    /// Whether an application polls (and so drives the device): its last CQ poll found
    /// nothing, less than `APP_ACTIVE_NS` ago, and it has not armed a CQ to sleep on.
    pub fn polls(&self, now: Nanos) -> bool {
        self.polling && !self.armed && self.active_for(now).is_some()
    }

    /// Whether the program takes its packets by sleeping on completion channels.
    pub fn waits(&self, now: Nanos) -> bool {
        waiters::app_waits(self.waiters, self.waiter_left_at, || now)
    }

    /// Whether the socket is the engine thread's to watch: nobody else takes its packets.
    pub fn leaves_socket(&self, now: Nanos) -> bool {
        !self.polls(now) && self.waiters == 0
    }

    /// After an application thread let go of the device with an engine timer due: whether
    /// the engine thread's deadline comes forward for it. Not while the application calls
    /// in (its polls serve the timers; if it stops, the engine thread notices within
    /// `engine::RECHECK`) or sleeps on a channel (the engine thread looks by itself).
    pub fn pulls_deadline(&self, now: Nanos) -> bool {
        self.active_for(now).is_none() && !self.waits(now)
    }

    /// After arming a CQ: whether the engine thread must be rung to watch the socket. A
    /// program that takes its events in `get_event` moves its packets there (and has just
    /// done so): the engine thread, which looks again soon, is not needed; one that polls
    /// the descriptor itself needs the engine thread on the socket now.
    pub fn arm_rings(&self, now: Nanos, watched: impl FnOnce() -> bool) -> bool {
        !self.waits(now) && !watched()
    }
}

/// What a CQ poll does to the socket's watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollWatch {
    /// Nothing changes.
    Keep,
    /// The application starts polling: it takes the packets, the engine thread stops
    /// watching (unless a CQ is armed: then the program sleeps on its channel and the
    /// engine thread keeps the socket). If the engine thread dozes (it went to its
    /// longest sleep before the application began), it is rung, so that it looks again
    /// within `engine::RECHECK` and sees the application stop: an application that stops
    /// after a poll that skips the hand-off would otherwise leave packets in an unwatched
    /// socket for the rest of that sleep.
    Unwatch,
    /// The application found completions after polling and may wait elsewhere: the engine
    /// thread watches again.
    Watch,
}

/// A CQ poll found `found` completions, the application having been `polling` (its last
/// poll found nothing) with hand-off score `score`.
pub fn poll_watch(found: usize, polling: bool, score: Score) -> PollWatch {
    match (found, polling) {
        (0, false) => PollWatch::Unwatch,
        (0, true) => PollWatch::Keep,
        (_, true) if !score.skipping() => PollWatch::Watch,
        _ => PollWatch::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_application_polls_while_its_empty_polls_are_recent_and_nothing_is_armed() {
        let mut a = AppSeen {
            polling: true,
            polled_at: 1_000_000,
            ..AppSeen::default()
        };
        assert!(a.polls(1_000_000 + APP_ACTIVE_NS - 1));
        assert!(!a.polls(1_000_000 + APP_ACTIVE_NS), "stopped polling");
        assert_eq!(
            a.active_for(1_000_000 + 50_000),
            Some(Duration::from_nanos(APP_ACTIVE_NS - 50_000))
        );
        assert!(!a.pulls_deadline(1_000_001));
        assert!(a.pulls_deadline(1_000_000 + APP_ACTIVE_NS));
        a.armed = true;
        assert!(!a.polls(1_000_001), "armed: it sleeps on its channel");
        a.armed = false;
        a.waiters = 1;
        assert!(!a.leaves_socket(5_000_000_000));
        assert!(!a.pulls_deadline(5_000_000_000));
        assert!(!a.arm_rings(5_000_000_000, || false));
        a.waiters = 0;
        assert!(a.leaves_socket(5_000_000_000));
        assert!(a.arm_rings(5_000_000_000, || false));
        assert!(!a.arm_rings(5_000_000_000, || true), "already watched");
    }

    #[test]
    fn polls_watch_when_they_find_after_polling_unless_skipping() {
        let skip = Score(super::super::handoff::SKIP_AT);
        assert_eq!(poll_watch(0, false, Score(0)), PollWatch::Unwatch);
        assert_eq!(poll_watch(0, true, Score(0)), PollWatch::Keep);
        assert_eq!(poll_watch(3, true, Score(0)), PollWatch::Watch);
        assert_eq!(poll_watch(3, true, skip), PollWatch::Keep);
        assert_eq!(poll_watch(3, false, Score(0)), PollWatch::Keep);
    }
}
