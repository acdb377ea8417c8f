//! The engine thread (the software NIC) and how it sleeps.
//!
//! It drives the device while packets move, polls on for `SPIN` after them where a core
//! is free (`cores.rs`), and otherwise sleeps (`sleeper.rs`) on a doorbell, its deadline
//! timer and the device's socket.
//!
//! An application that busy-polls a CQ drives the device itself, taking every packet that
//! arrives and serving the timers, so meanwhile this thread sleeps: the socket is not
//! watched, no deadline is set, and posts do not ring. When a poll finds completions the
//! application may go and wait elsewhere: the target of an RDMA WRITE may spin on its
//! memory without calling in (ib_write_lat does), and one-sided operations must progress
//! without the target's CPU. So such a poll watches the socket again (one shot,
//! `EPOLLONESHOT`), and the next empty poll stops watching it; a packet that slips in
//! between wakes this thread, which leaves it to the application if it polls. Meanwhile
//! this thread looks every `RECHECK` whether the application still polls: one that stops
//! without finding anything is noticed then (no timer is armed per poll: see
//! `sleeper.rs` for what that costs), and so is one that stopped after a poll that found
//! completions but did not hand the socket over (`handoff.rs`).
//!
//! A program that sleeps on a completion channel in `get_event` takes its packets there
//! itself (`channel.rs`): while it does (and a moment after it wakes, as it will be back),
//! this thread neither watches the socket nor sets a deadline; it looks every millisecond
//! (`look`: due timers, a packet left), less often while the waiter sleeps on
//! (`waiters.rs` decides).
//!
//! A bandwidth client's polls find completions often, so this thread, woken by a packet,
//! would go on driving for as long as packets move, the application spinning at the lock
//! meanwhile. Once the hand-offs show that the application comes straight back after such
//! polls, this thread leaves the device to it after one turn if it called in meanwhile
//! (`Shared::app_called`): client CPU per GB 7-10 % lower, 64 KiB WRITE 1.04-1.10x.
//!
//! `perf write-bw`'s client rarely shows that (it posts for longer than `QUICK_NS` after
//! its polls, and this thread's takeovers zero the score), so this thread still takes
//! turns in its stream. Those turns are worth their lock fight: they send the WRs posted
//! meanwhile together, in full GSO runs. Keeping this thread out of the stream altogether
//! (leaving a packet that woke it to an application holding the device, counting a post
//! as the return) cut the veth client's CPU per GB 5-16 % but raised the target's 8-15 %,
//! and cost 11 % of loopback bandwidth: each WR then left alone, a 64 KiB one as a GSO run
//! of 60 packets and one of 4 (`OXRDMA_BATCHES=1` shows it).

use crate::cores::Cores;
use crate::shared::Shared;
use crate::sleeper::{Woke, MAX_SLEEP};
use crate::waiters::Nap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often this thread looks whether a polling application still polls.
const RECHECK: Duration = Duration::from_millis(1);

/// How late this thread's sleep timeouts may end (ns).
const TIMER_SLACK_NS: u64 = 4_000_000;

/// How long this thread polls on after the last packet it moved, if a core is free for it
/// (`cores.rs`), before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

/// A run of turns that moved more packets than this between two idle ones is a stream,
/// after which this thread does not poll on: a stream's packets come in bursts that the
/// socket holds until the thread wakes, so polling between them bought no bandwidth and
/// cost a 64 KiB WRITE target 4-6 % of its CPU (veth, loopback). A passive target's READ
/// or atomic moves two.
const STREAM: usize = 16;

/// The engine thread's loop: drive the device while packets move, otherwise sleep.
///
/// It polls on between packets only while a core is free for it (`spin`), and not after a
/// stream (`Streak`): on a host with fewer cores than busy threads (two cores running a
/// ping-pong's two application threads) a polling NIC thread takes the core from the thread
/// that would answer, and a wait costs the time slice (200 idle polls before sleeping gave
/// the passive-target `perf write-lat` 170 us per half round trip on this 2-core host, none
/// 33 us). Where a core is free, as for the target of READs or atomics whose application
/// does nothing, polling on saves each request a wake-up: `perf read-lat` 23.8 -> 6.8 us,
/// `atomic-lat` 24.5 -> 8.3 us, perftest's `ib_read_lat` on the C library 17-24 -> 6.7 us.
pub(crate) fn engine_thread(shared: &Shared) {
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    shared.engine_tid.store(tid, Ordering::Release);
    // Sleep timeouts (`RECHECK`, `MAX_SLEEP`) may end up to this much late: a timeout due
    // before the next scheduler tick would make the kernel reprogram the clock for it (see
    // `sleeper.rs`); with the slack it rides on the tick. Deadlines use a timerfd, exact.
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(TIMER_SLACK_NS));
    // Whether a packet or a post woke this thread (else a timer did).
    let mut work = true;
    // Whether this thread's last turn moved packets (it did not sleep since).
    let mut moving = false;
    // When it last moved packets, and whether a core is free to poll on.
    let (mut moved_at, mut cores) = (None::<Instant>, Cores::new());
    let mut streak = Streak::default();
    // How long to nap while the program sleeps on its channels (`waiters.rs`).
    let mut naps = Nap::default();
    while !shared.stop.load(Ordering::Acquire) {
        if shared.app_waits() {
            // The program sleeps on a completion channel and takes the packets itself
            // (`channel.rs`). This thread serves the timers and looks whether it still
            // does, every `LOOK` while it keeps waking, less often while it sleeps on.
            let next = look(shared);
            let l = naps.look(shared.waits(), next);
            shared.dozing.store(l.dozing, Ordering::SeqCst);
            // Looked again after saying so: a waiter that woke before it missed the word.
            if l.dozing && !shared.app_waits() {
                shared.dozing.store(false, Ordering::SeqCst);
                continue;
            }
            work = sleep(shared, l.nap);
            moving = false;
            continue;
        }
        shared.dozing.store(false, Ordering::Relaxed);
        if !shared.any_armed() {
            if shared.app_polls() {
                // The application polls and takes what arrives itself, and serves the
                // timers (a probe deadline its ACK made stale would wake this thread for
                // nothing).
                shared.sleeper.set_deadline(None);
                work = sleep(shared, RECHECK);
                continue;
            }
            if let (false, Some(left)) = (work, shared.app_active_for()) {
                // A timer, while the application still calls in: its next poll serves
                // the engine's timers, and if there is none, this thread looks again.
                work = sleep(shared, left);
                continue;
            }
        }
        let moved = {
            // Not `shared.lock()`: this loop comes back to pending work by itself.
            let mut dev = shared.lock_raw();
            let called = shared.app_called();
            if called && moving && shared.handoff.skipping() && !shared.any_armed() {
                // The application called in during this thread's last turn, and comes
                // straight back after finding completions: it moves the packets itself
                // (see the top). Left to it; this thread looks again as when it polls.
                drop(dev);
                moving = false;
                work = sleep(shared, RECHECK);
                continue;
            }
            if !work {
                // Time woke this thread, and the application no longer polls: whatever
                // waited since its last poll did so for a hand-off it skipped.
                shared.handoff.taken_over();
            }
            shared.pending.store(false, Ordering::SeqCst);
            let moved = dev.poll().unwrap_or(0);
            shared.collect_events(&mut dev);
            shared.notify_armed();
            if moved == 0 {
                // Under the lock: a post after this brings the deadline forward, not back.
                // While the application calls in, its polls serve the timers (and this
                // thread looks again within `RECHECK` if it stops).
                let active = shared.app_active_for().is_some();
                shared
                    .sleeper
                    .set_deadline(dev.next_timer_in().filter(|_| !active));
            }
            moved
        };
        moving = moved > 0;
        if moving {
            moved_at = Some(Instant::now());
        }
        let after_stream = streak.turn(moved);
        // A thread sleeping on a completion channel takes the packets that come
        // (`channel.rs`): polling on would only fight it for them.
        let waiter = shared.waiter_sleeps();
        work = (moving && !waiter)
            || (!after_stream && !waiter && spin(moved_at, &mut cores))
            || sleep_until_work(shared);
    }
}

/// One turn while the program sleeps on its channels: serves the timers due (and takes
/// any packet a waiter has not), and says when the next is due. The socket stays
/// unwatched and no deadline is set: the waiters take the packets.
fn look(shared: &Shared) -> Option<Duration> {
    let mut dev = shared.lock_raw();
    shared.pending.store(false, Ordering::SeqCst);
    let _ = dev.poll();
    shared.collect_events(&mut dev);
    shared.sleeper.set_deadline(None);
    let next = dev.next_timer_in();
    drop(dev);
    shared.notify_armed();
    shared.sleeper.set_watched(false);
    next
}

/// Packets moved since the engine thread was last idle, to tell a stream from requests.
#[derive(Debug, Default)]
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

/// Whether to poll again at once rather than sleep: packets moved less than `SPIN` ago
/// and a core is free, so the next packet (a passive target's next READ, atomic or
/// WRITE) is taken without a wake-up (18-25 us on this VM). The core is yielded first:
/// a thread that needs it gets it.
fn spin(moved_at: Option<Instant>, cores: &mut Cores) -> bool {
    if moved_at.is_none_or(|t| t.elapsed() >= SPIN) || !cores.free() {
        return false;
    }
    std::thread::yield_now();
    true
}

/// Sleeps until a packet arrives, work is posted that no other thread moves, or the
/// deadline timer fires. True unless only a timer woke it.
fn sleep_until_work(shared: &Shared) -> bool {
    // Not while the application polls or a thread sleeps on a channel (they take the
    // packets).
    shared.watch_unless_taken();
    // A post that found the device locked by this thread left `pending` set before this
    // thread unlocked it; one after that drove the device itself.
    std::sync::atomic::fence(Ordering::SeqCst);
    shared.pending.load(Ordering::SeqCst) || sleep(shared, MAX_SLEEP)
}

/// Sleeps until something wakes this thread or `timeout` passes; true unless only time
/// passed. A packet on the watched socket means a hand-off was needed (`handoff.rs`).
fn sleep(shared: &Shared, timeout: Duration) -> bool {
    let woke = shared.sleeper.wait(timeout);
    if woke == Woke::Packet {
        shared.handoff.woken();
    }
    woke != Woke::Time
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
