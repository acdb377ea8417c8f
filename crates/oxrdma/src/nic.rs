//! The engine thread (the software NIC) and how it sleeps.
//!
//! It drives the device while packets move and otherwise sleeps in `epoll_wait` on a
//! doorbell eventfd (rung by posting threads), a timerfd (its next deadline) and the
//! device's socket.
//!
//! An application that busy-polls a CQ drives the device itself and takes every packet
//! that arrives, so meanwhile the socket is not watched and packets do not wake this
//! thread. When a poll finds completions the application may go and wait
//! elsewhere: the target of an RDMA WRITE may spin on its memory without calling in
//! (ib_write_lat does), and one-sided operations must progress without the target's CPU.
//! So such a poll watches the socket again (one shot, `EPOLLONESHOT`), and the next empty
//! poll stops watching it. Both are one `epoll_ctl` of the polling thread; a packet that
//! slips in between wakes this thread, which leaves it to the application if it polls.
//! An application that stops polling without finding anything is noticed within
//! `Shared`'s activity window (the recheck timer).

use crate::shared::Shared;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Longest sleep (so a stop request is seen even if the doorbell is missed).
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(50);

/// The engine thread's loop: drive the device while packets move, otherwise sleep.
///
/// It does not spin between packets: on a host with fewer cores than busy threads (two
/// cores running a ping-pong's two application threads) a spinning NIC thread takes the
/// core from the thread that would answer, and a wait costs the time slice. Measured on
/// this 2-core host with the passive-target `perf write-lat`: 200 idle polls before
/// sleeping gave 170 us per half round trip, 8 gave 37 us, none 33 us; 64 KiB WRITE
/// bandwidth stayed the same (a GRO batch is 64 KiB per wake-up).
pub(crate) fn engine_thread(shared: &Shared) {
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    shared.engine_tid.store(tid, Ordering::Release);
    while !shared.stop.load(Ordering::Acquire) {
        let armed = !shared.armed().is_empty();
        if let (Some(left), false) = (shared.app_polling_for(), armed) {
            // The application polls and takes what arrives itself.
            shared.sleeper.wait(left.min(MAX_SLEEP));
            continue;
        }
        let moved = {
            // Not `shared.lock()`: this loop comes back to pending work by itself.
            let mut dev = shared.lock_raw();
            shared.pending.store(false, Ordering::SeqCst);
            let moved = dev.poll().unwrap_or(0);
            shared.collect_events(&mut dev);
            let mut armed = shared.armed();
            armed.retain(|(cq, channel)| {
                if dev.engine.cq_len(*cq) > 0 {
                    channel.notify(*cq);
                    false
                } else {
                    true
                }
            });
            moved
        };
        if moved == 0 {
            sleep_until_work(shared);
        }
    }
}

/// Sleeps until a packet arrives, work is posted or the next timer (at most `MAX_SLEEP`
/// away) is due.
fn sleep_until_work(shared: &Shared) {
    shared.sleeper.set_watched(true);
    // Announce the sleep before the last look for work, so a poster that misses the flag
    // has posted early enough for this look to see it.
    shared.asleep.store(true, Ordering::SeqCst);
    if !shared.pending.load(Ordering::SeqCst) {
        // Timers as they are once `asleep` is announced (a post since the last drive may
        // have armed one).
        let sleep = shared
            .lock_raw()
            .next_timer_in()
            .map_or(MAX_SLEEP, |t| t.min(MAX_SLEEP));
        shared.sleeper.wait(sleep);
    }
    shared.asleep.store(false, Ordering::SeqCst);
}
