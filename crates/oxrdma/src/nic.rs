//! The engine thread (the software NIC): a loop that asks `oxrdma_core::driving`'s
//! `EngineThread` what to do at each step (drive, leave the device to the application,
//! poll on, look, sleep) and carries it out with the device lock, the sleeper's epoll set
//! and timers (`sleeper.rs`), and the load reading (`cores.rs`). Why it decides as it
//! does is said there.
//!
//! `perf write-bw`'s client rarely lets this thread leave the device to it (it posts for
//! longer than `handoff::QUICK_NS` after its polls, and this thread's takeovers zero the
//! score), so this thread still takes turns in its stream. Those turns are worth their
//! lock fight: they send the WRs posted meanwhile together, in full GSO runs. Keeping this
//! thread out of the stream altogether (leaving a packet that woke it to an application
//! holding the device, counting a post as the return) cut the veth client's CPU per GB
//! 5-16 % but raised the target's 8-15 %, and cost 11 % of loopback bandwidth: each WR
//! then left alone, a 64 KiB one as a GSO run of 60 packets and one of 4
//! (`OXRDMA_BATCHES=1` shows it).

use crate::cores::Cores;
use crate::host_stats::Publisher;
use crate::shared::Shared;
use oxrdma_core::driving::{After, Before, EngineThread, Turn, Woke, RECHECK};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How late this thread's sleep timeouts may end (ns).
const TIMER_SLACK_NS: u64 = 4_000_000;

/// The engine thread's loop.
pub(crate) fn engine_thread(shared: &Shared) {
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    shared.engine_tid.store(tid, Ordering::Release);
    // Sleep timeouts (`RECHECK`, `MAX_SLEEP`) may end up to this much late: a timeout due
    // before the next scheduler tick would make the kernel reprogram the clock for it (see
    // `sleeper.rs`); with the slack it rides on the tick. Deadlines use a timerfd, exact.
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(TIMER_SLACK_NS));
    let mut me = EngineThread::default();
    let mut cores = Cores::new();
    let name = std::thread::current().name().unwrap_or("nic").to_string();
    let address = shared.facts.gids.first().copied().unwrap_or_default().ip();
    let mut show = Publisher::new(&name, address, tid);
    while !shared.stop.load(Ordering::Acquire) {
        let now = shared.now_ns();
        if let Some(show) = show.as_mut().filter(|s| s.due(now)) {
            // Every `host_stats::EVERY` at most, for `oxrdma stats` in another shell.
            let counters = shared.lock_raw().counters();
            show.publish(now, &counters);
        }
        match me.before(&shared.seen(), now) {
            Before::Look => {
                let next = look(shared);
                let l = me.looked(shared.waits(), next);
                shared.dozing.store(l.dozing, Ordering::SeqCst);
                // Looked again after saying so: a waiter that woke before it missed the word.
                if l.dozing && !shared.app_waits() {
                    shared.dozing.store(false, Ordering::SeqCst);
                    continue;
                }
                me.slept(sleep(shared, l.nap));
                continue;
            }
            Before::Sleep {
                timeout,
                clear_deadline,
            } => {
                shared.dozing.store(false, Ordering::Relaxed);
                if clear_deadline {
                    shared.sleeper.set_deadline(None);
                }
                me.slept(sleep(shared, timeout));
                continue;
            }
            Before::Turn => shared.dozing.store(false, Ordering::Relaxed),
        }
        let moved = {
            // Not `shared.lock()`: this loop comes back to pending work by itself.
            let mut dev = shared.lock_raw();
            let seen = shared.seen();
            match me.turn(shared.app_called(), &seen) {
                Turn::Leave => {
                    drop(dev);
                    me.slept(sleep(shared, RECHECK));
                    continue;
                }
                Turn::Drive { taken_over } => {
                    if taken_over {
                        shared.handoff.taken_over();
                    }
                }
            }
            shared.pending.store(false, Ordering::SeqCst);
            dev.engine.set_app_serves_timers(seen.serves_timers(now));
            let moved = dev.poll().unwrap_or(0);
            shared.collect_events(&mut dev);
            shared.notify_armed();
            if moved == 0 {
                // Under the lock: a post after this brings the deadline forward, not back.
                let next = me.deadline(&shared.seen(), shared.now_ns(), dev.next_timer_in());
                shared.sleeper.set_deadline(next);
            }
            moved
        };
        let waiter = shared.waiter_sleeps();
        match me.driven(moved, waiter, shared.now_ns(), || cores.free()) {
            After::Again => {}
            // The core is yielded first: a thread that needs it gets it.
            After::Spin => std::thread::yield_now(),
            After::Sleep => {
                // Dozing first, then the watch (`EngineThread::sleep_after`).
                shared.dozing.store(true, Ordering::SeqCst);
                let l = me.sleep_after(shared.watch_unless_taken());
                shared.dozing.store(l.dozing, Ordering::SeqCst);
                // A post that found the device locked by this thread left `pending` set
                // before this thread unlocked it; one after that drove the device itself.
                std::sync::atomic::fence(Ordering::SeqCst);
                if shared.pending.load(Ordering::SeqCst) {
                    me.pending();
                } else {
                    me.slept(sleep(shared, l.nap));
                }
            }
        }
    }
}

/// One turn while the program sleeps on its channels: serves the timers due (and takes
/// any packet a waiter has not), and says when the next is due. The socket stays
/// unwatched and no deadline is set: the waiters take the packets.
fn look(shared: &Shared) -> Option<Duration> {
    let mut dev = shared.lock_raw();
    shared.pending.store(false, Ordering::SeqCst);
    // What the packets taken owe the peer (an ACK: `Link::poll` returns once packets
    // arrived) leaves now, not at the next look.
    if matches!(dev.poll(), Ok(n) if n > 0) {
        let _ = dev.transmit();
    }
    shared.collect_events(&mut dev);
    shared.sleeper.set_deadline(None);
    let next = dev.next_timer_in();
    drop(dev);
    shared.notify_armed();
    shared.sleeper.set_watched(false);
    next
}

/// Sleeps until something wakes this thread or `timeout` passes, and says what woke it. A
/// packet on the watched socket means a hand-off was needed (`handoff.rs`).
fn sleep(shared: &Shared, timeout: Duration) -> Woke {
    let woke = shared.sleeper.wait(timeout);
    if woke == Woke::Packet {
        shared.handoff.woken();
    }
    woke
}
