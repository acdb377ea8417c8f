//! The engine thread (the software NIC) and how it sleeps.
//!
//! It drives the device while packets move and otherwise sleeps in `epoll_wait` on a
//! doorbell eventfd (rung by posting threads), a timerfd (its next deadline) and the
//! device's socket.
//!
//! An application that busy-polls a CQ drives the device itself and takes every packet
//! that arrives, so meanwhile the socket is not watched: a ping-pong whose both ends poll
//! never wakes this thread. When a poll finds completions the application may go and wait
//! elsewhere: the target of an RDMA WRITE may spin on its memory without calling in
//! (ib_write_lat does), and one-sided operations must progress without the target's CPU.
//! So such a poll watches the socket again (one shot, `EPOLLONESHOT`), and the next empty
//! poll stops watching it. Both are one `epoll_ctl` of the polling thread; a packet that
//! slips in between wakes this thread, which leaves it to the application if it polls.
//! An application that stops polling without finding anything is noticed within
//! `Shared`'s activity window (the recheck timer).

use crate::context::Shared;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::event::{eventfd, EventfdFlags};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Longest sleep (so a stop request is seen even if the doorbell is missed).
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(50);

/// What woke the engine thread (epoll's data).
const DOORBELL: u64 = 0;
const SOCKET: u64 = 1;
const DEADLINE: u64 = 2;
const RECHECK: u64 = 3;

/// What the engine thread sleeps on: the doorbell, the socket while it is watched, the
/// recheck timer, and a timer for its own deadline (epoll's timeout counts whole
/// milliseconds; the engine's timers, tail-loss probes among them, need microseconds).
pub(crate) struct Sleeper {
    epoll: OwnedFd,
    doorbell: OwnedFd,
    deadline: OwnedFd,
    /// When the engine thread looks again whether the application still polls.
    recheck: OwnedFd,
    /// The device's socket (a duplicate: the device owns the original).
    sock: OwnedFd,
    /// Whether the socket is armed in `epoll` (it disarms itself when it fires).
    watched: AtomicBool,
}

fn timer() -> std::io::Result<OwnedFd> {
    Ok(timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )?)
}

/// Reads an eventfd's or timerfd's count, so it is not readable until the next event.
fn clear(fd: &OwnedFd) {
    let mut count = [0u8; 8];
    let _ = rustix::io::read(fd, &mut count);
}

/// Starts a one-shot timer.
fn set_timer(timer: &OwnedFd, after: Duration) -> rustix::io::Result<()> {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // At least 1 ns: zero would stop the timer.
    let it_value = Timespec::try_from(after.max(Duration::from_nanos(1))).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    let spec = Itimerspec {
        it_interval: zero,
        it_value,
    };
    timerfd_settime(timer, TimerfdTimerFlags::empty(), &spec).map(drop)
}

impl Sleeper {
    pub fn new(sock: BorrowedFd<'_>) -> std::io::Result<Sleeper> {
        let doorbell = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        let (deadline, recheck) = (timer()?, timer()?);
        let sock = sock.try_clone_to_owned()?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (fd, key) in [
            (&doorbell, DOORBELL),
            (&deadline, DEADLINE),
            (&recheck, RECHECK),
        ] {
            epoll::add(
                &epoll,
                fd,
                epoll::EventData::new_u64(key),
                epoll::EventFlags::IN,
            )?;
        }
        epoll::add(
            &epoll,
            &sock,
            epoll::EventData::new_u64(SOCKET),
            epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
        )?;
        Ok(Sleeper {
            epoll,
            doorbell,
            deadline,
            recheck,
            sock,
            watched: AtomicBool::new(true),
        })
    }

    /// Wakes the engine thread.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.doorbell, &1u64.to_ne_bytes());
    }

    /// The application found completions and may stop polling: watch the socket.
    pub fn hand_off(&self) {
        self.set_watched(true);
    }

    /// The application polls (and so drives the device): stop watching the socket. If the
    /// engine thread sleeps (`asleep`) it looks again after `window` at the latest.
    pub fn app_polls(&self, asleep: bool, window: Duration) {
        if asleep {
            let _ = set_timer(&self.recheck, window);
        }
        self.set_watched(false);
    }

    /// Arms the socket (a packet waiting or arriving wakes the engine thread), or disarms it.
    fn set_watched(&self, on: bool) {
        if self.watched.swap(on, Ordering::SeqCst) != on {
            let flags = if on {
                epoll::EventFlags::IN | epoll::EventFlags::ONESHOT
            } else {
                epoll::EventFlags::ONESHOT
            };
            let _ = epoll::modify(
                &self.epoll,
                &self.sock,
                epoll::EventData::new_u64(SOCKET),
                flags,
            );
        }
    }

    /// Sleeps until something wakes the engine thread or `timeout` passes.
    fn wait(&self, timeout: Duration) {
        if set_timer(&self.deadline, timeout).is_err() {
            // No timer: do not sleep past the deadline.
            return;
        }
        let mut events: Vec<epoll::Event> = Vec::with_capacity(4);
        let _ = epoll::wait(&self.epoll, spare_capacity(&mut events), None);
        for e in &events {
            match e.data.u64() {
                // One shot: the kernel disarmed it.
                SOCKET => self.watched.store(false, Ordering::SeqCst),
                DEADLINE => clear(&self.deadline),
                RECHECK => clear(&self.recheck),
                _ => clear(&self.doorbell),
            }
        }
    }
}

/// The engine thread's loop: drive the device while packets move, otherwise sleep.
///
/// It does not spin between packets: on a host with fewer cores than busy threads (two
/// cores running a ping-pong's two application threads) a spinning NIC thread takes the
/// core from the thread that would answer, and a wait costs the time slice. Measured on
/// this 2-core host with the passive-target `perf write-lat`: 200 idle polls before
/// sleeping gave 170 us per half round trip, 8 gave 37 us, none 33 us; 64 KiB WRITE
/// bandwidth stayed the same (a GRO batch is 64 KiB per wake-up).
pub(crate) fn engine_thread(shared: &Shared) {
    while !shared.stop.load(Ordering::Acquire) {
        let armed = !shared.armed().is_empty();
        if let (Some(left), false) = (shared.app_polling_for(), armed) {
            // The application polls and takes what arrives itself.
            shared.sleeper.wait(left.min(MAX_SLEEP));
            continue;
        }
        let (moved, sleep) = {
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
            (
                moved,
                dev.next_timer_in().map_or(MAX_SLEEP, |t| t.min(MAX_SLEEP)),
            )
        };
        if moved == 0 {
            sleep_until_work(shared, sleep);
        }
    }
}

/// Sleeps until a packet arrives, work is posted or the next timer (at most `max`) is due.
fn sleep_until_work(shared: &Shared, max: Duration) {
    shared.sleeper.set_watched(true);
    // Announce the sleep before the last look for work, so a poster that misses the flag
    // has posted early enough for this look to see it.
    shared.asleep.store(true, Ordering::SeqCst);
    if !shared.pending.load(Ordering::SeqCst) {
        let sleep = shared
            .lock_raw()
            .next_timer_in()
            .map_or(max, |t| t.min(max));
        shared.sleeper.wait(sleep);
    }
    shared.asleep.store(false, Ordering::SeqCst);
}
